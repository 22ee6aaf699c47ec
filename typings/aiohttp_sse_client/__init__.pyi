# The part of aiohttp-sse-client 0.2.1 that runtime/client/sse.py and stream.py use (the
# package ships no type information; docs/decisions.md).
