"""The fire path: from a due slot or message to its run record (ticker, claims, lanes,
execution, outcome, recorder).
"""
