"""Backends shipped with the core distribution (registered through the plugin hook)."""
