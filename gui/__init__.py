"""The Qt runner and energy viewer (a later issue). Only talks to `rig`."""
