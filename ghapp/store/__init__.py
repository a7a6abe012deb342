"""Autoloop: ghapp/store."""
