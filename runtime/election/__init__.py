"""The election: the lease loop, its pure decision, its calls, the heartbeat, the takeover's
bridge rule and the sleep watch.
"""
