"""The bottom layer every package may import: the clock, the async kit, the vocabulary,
the route table and the wire shapes."""
