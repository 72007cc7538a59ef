"""``python -m local_model ARGS``: llama.cpp's OpenAI-compatible server (``llama_cpp.server``,
the same arguments) with the workbench's chat format registered (:mod:`local_model._launcher`).
:class:`local_model.LocalModelServer` starts it this way. (Here rather than under the
launcher's own ``__main__`` guard: ``-m local_model._launcher`` would run a module the
package has already imported, which runpy warns about.)"""

from local_model._launcher import register

if __name__ == "__main__":
    register()
    from llama_cpp.server.__main__ import main

    main()  # type: ignore[no-untyped-call]
