"""Autoloop: ghapp/sandbox."""
