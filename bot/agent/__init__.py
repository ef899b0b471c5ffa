"""The agent core: conversation model, model adapters, the ReAct loop and the engine around it."""
