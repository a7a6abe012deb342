"""The HTTP face: webhooks, card links and what ``autoloop serve`` needs to start."""
