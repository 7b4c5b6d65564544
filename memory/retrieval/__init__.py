"""The memory read path: one pipeline from hard eligibility to a trace bound to the rendered bytes.

form query -> hard filter (eligibility) -> arms -> fuse -> rank -> collapse -> safety -> pack ->
render -> trace. Every entry point (prompt assembly, the recall verb, the trace view, admin previews,
commands) calls ``memory.retrieval.service``; none builds its own retrieval query.
"""
