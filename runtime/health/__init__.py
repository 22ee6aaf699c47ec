"""The health pass: stamps every record that cannot run with why, the re-check instants and
the touched set.
"""
