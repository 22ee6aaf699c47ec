"""chat-watch and the responders: intake, turns, replies, and the built-in, OpenAI-compatible,
command and callable responders.

Imports only core/, the client and triggers.records; never the daemon or the CLI.
"""
