"""The domain, in rooms by concern, each importing only the rooms below it:
bench < traces < datasets < run < qubo < report / mqtt / cluster / model < commands.

Loose at the top: `cli` (the `rig` command), `errors`, `units`. `rig` imports `drivers` and
`protocols`, never `gui`.
"""

__version__ = "0.1.0"
