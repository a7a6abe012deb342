"""The plugins: agent adapters, and the GitHub source with every example payload."""
