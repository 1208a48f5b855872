"""Pure codecs and state machines (sans-IO): bytes in, typed events out. Imports nothing of ours."""
