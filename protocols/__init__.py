"""The wire formats: each package holds one API's request models, their validation and the
renderers of pipeline events into its JSON and SSE; it turns a request into the call the
pipeline takes (pipeline.call_params.ChatParams). The transports (api/, ui/) use these; the
pipeline imports none of them."""
