"""Training and export tools for the models the DUTs run (`rig model ...`).

They live on the rig side: the firmware loads what these tools write, and imports nothing of
the rig. Mapping and quantising a network for Xylo (`firmware.xylo.spec.build_spec`) stays with
the firmware, whose shim maps a NIR graph itself when it loads one; the trainer calls it there.
`c_shim` trains the C shim's `asc01` model (firmware/dut); `xylo` trains the Xylo
Audio 2 network (firmware/xylo); `split` is the validation split both kinds of tuning use.
"""
