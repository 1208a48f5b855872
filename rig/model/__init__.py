"""Training and export tools for the models the DUTs run (`rig model ...`).

They live on the rig side: the firmware only loads what these tools write, and imports nothing
of the rig. `c_shim` trains the C shim's `asc01` model (firmware/dut); `xylo` trains the Xylo
Audio 2 network (firmware/xylo); `split` is the validation split both kinds of tuning use.
"""
