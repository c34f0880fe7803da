"""The model path: the OpenAI-protocol chat client, the tools the model may call, the prompts, and the LLM repair."""
