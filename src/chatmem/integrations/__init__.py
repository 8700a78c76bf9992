"""Adapters that let agent frameworks use chatmem through their own interfaces.

Each adapter is a module of its own, imported on demand, and needs its framework, which
comes with an extra; ``import chatmem`` imports none of them:

- ``chatmem.integrations.langgraph``: ``ChatmemStore``, a LangGraph ``BaseStore``
  (``pip install 'chatmem[langgraph]'``).
- ``chatmem.integrations.llamaindex``: ``ChatmemMemoryBlock``, a memory block for
  LlamaIndex's ``Memory`` (``pip install 'chatmem[llamaindex]'``).
- ``chatmem.integrations.openai_agents``: ``ChatmemSession``, an OpenAI Agents SDK
  ``Session`` on chatmem's short-term memory (``pip install 'chatmem[agents]'``).
"""
