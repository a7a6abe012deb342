"""Autoloop: plugins/sources."""
