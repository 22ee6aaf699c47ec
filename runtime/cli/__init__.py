"""The `baton` command: every verb, its tables, the demo, and the only place that reads the
`BATON_*` variables and config files. The daemon never imports it.
"""
