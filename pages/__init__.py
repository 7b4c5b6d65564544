"""The pages people see: the front door, a person's turns and "what did the agent know" for each, the
messages they may open, what the agent knows about them, and their data download.

Server-rendered and usable without JavaScript. The views here are thin: they read through
:mod:`memory.selectors` (whatever the viewer may not see answers 404, exactly like a missing object) and
write through the services (:mod:`memory.rejections`, :mod:`memory.sharing`); the templates live beside
them in ``pages/templates/pages/``.
"""
