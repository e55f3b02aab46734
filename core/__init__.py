"""Types every layer shares: the chat, the sampling parameters, the engine's output."""
