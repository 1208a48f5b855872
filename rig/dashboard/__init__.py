"""`rig dashboard`: a web page of every rig on the lab's MQTT broker, one more reader of it.

- `fleet`: the state, folded from broker messages (pure: JSON in, state and updates out).
- `hub`: the fleet and the pages that follow it: the broker subscription and the update fan-out.
- `auth`: the dashboard's own login (a token file) and its sessions.
- `control`: start and stop, sent as schema-checked commands with operator credentials.
- `server`: the Starlette app (pages, server-sent events, the command endpoint).
- `static/`: the pages' HTML, script and style, served from the package (no CDN).

Starlette and uvicorn (the `dashboard` extra) are imported only by `server` and the command.
"""
