"""The bottom of baton: the one vocabulary, route table and wire shapes every package may import."""
