"""``python -m local_model ARGS``: llama.cpp's OpenAI-compatible server (``llama_cpp.server``,
the same arguments) with the workbench's chat format registered and its render route
added (:mod:`local_model._launcher`). :class:`local_model.LocalModelServer` starts it
this way. (Here rather than under the launcher's own ``__main__`` guard: ``-m
local_model._launcher`` would run a module the package has already imported, which
runpy warns about.)"""

from local_model._launcher import add_routes, register

if __name__ == "__main__":
    register()
    from llama_cpp.server import __main__ as server

    made = server.create_app  # type: ignore[attr-defined]
    server.create_app = lambda *args, **kwargs: add_routes(made(*args, **kwargs))  # type: ignore[attr-defined]
    server.main()  # type: ignore[no-untyped-call]
