"""The any@v1 client: its calls, their retry, its SSE connection and streams, and the Seat.

Imports only core/ and triggers.records; knows nothing of the daemon, the chat or the CLI.
"""
