"""End to end: the sandbox GitHub with the App, crashes, redaction, the seeded simulation."""
