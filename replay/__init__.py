"""replay: rematerialize the request behind any message, verify it, re-run it, diff the outputs.

Not built yet (see the replay issue); the package exists so the layout is in place.
"""
