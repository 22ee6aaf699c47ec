"""The feeds: the reconciler (records and their change feed) and the chat subscriptions
whose messages become event fires.
"""
