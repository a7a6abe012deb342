"""Small I/O adapters behind Protocols: sources, agents, channels."""
