"""The bottom layer: the clock, the async kit and the vocabulary every package may import."""
