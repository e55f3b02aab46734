"""The application layer: one request pipeline that the HTTP API and the page both render.

A transport identifies the caller (`Keyring`), builds a `ChatCall` and reads typed events from
`ChatPipeline`; priority, the response cache, submission to the scheduler, release and the
queue-notice cadence happen here once.
"""
