"""The GitHub edge: client, auth, sans-I/O helpers, retries, executor and channel."""
