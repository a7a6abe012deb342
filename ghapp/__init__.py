"""The shell: CLI, HTTP server, worker, stores, GitHub client, Action entry."""
