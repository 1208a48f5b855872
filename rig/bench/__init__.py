"""What a bench is, read from its file: the lowest room of `rig`.

- `config`: bench files (TOML) loaded and validated into a `Bench` (`load_bench`).
- `numbers`: numbers read from the rig's TOML files, checked against their spans and units.
- `saving`: a `Bench` written back to a bench file (the runner GUI's "Save bench").
- `ports`: serial ports listed with their USB ids, optionally knocked on with ``name%``.
- `broker`: the MQTT broker settings of a bench's `[mqtt]` table and the environment.
- `worker`: a worker file's `[worker]` table, the resources a rig host owns on a cluster.
- `virtual`: the virtual bench started as a process (`python -m virtual_bench`) and its ports.

Every room above may import it (traces, datasets, run, qubo, report, mqtt, cluster, model,
commands, and gui); it imports only `rig.errors`, `drivers` and `protocols`.
"""
