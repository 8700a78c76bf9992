"""The OpenAI Responses API with memory: ``POST /v1/responses``, ``GET`` and ``DELETE
/v1/responses/{id}`` (SPEC A2).

One request: read the input (a string, or a list of message items) → continue the chain of
``previous_response_id`` when given (the tenant's own responses only) → retrieve and inject
the user's memories as the chat proxy does → send the chain, the new input and the memories
to the upstream's ``/chat/completions`` → answer with a Response object → keep it for the
next link of the chain (unless ``store`` is false) → then, off the request path, append the
turn to the session and queue extraction (``memory_config.auto_store``).

The memory user is ``memory_context.user_id``, else the previous response's user, else
``user``, else the ``X-Chatmem-User`` header. The session is ``memory_context.session_id``,
else the ``X-Chatmem-Session`` header, else the chain's (the id of its first response), so
one chain is one session.

With ``stream: true`` the upstream is asked for a chat-completions stream and the answer is
sent as OpenAI's Responses events (``response.created`` … ``response.output_text.delta`` …
``response.completed``). The response is kept and the turn stored only once the upstream has
finished; a stream the upstream breaks off ends with ``response.failed`` and keeps nothing,
and so does one the client leaves before the upstream finishes.

Agent frameworks (the OpenAI Agents SDK among them) work through it: function ``tools``,
``tool_choice``, ``parallel_tool_calls``, ``text.format`` and ``reasoning.effort`` are passed
to the upstream in their chat-completions shape, the answer's tool calls come back as
``function_call`` output items (streamed too), and ``function_call`` and
``function_call_output`` input items go up as the assistant's tool calls and ``tool``
messages (``chatmem.server.translate`` says what maps to what, and what cannot pass: a 400
with code ``unsupported_parameter``). ``background: true`` is such a 400: chatmem answers
within the request. Accepted and ignored, so OpenAI clients that send them work:
``include``, ``truncation``, ``service_tier``, ``prompt_cache_key``, ``safety_identifier`` and
``stream_options``. Any other unknown field is a 400 naming it.

The package, by concern: ``request`` (the request and its translation), ``chain`` (the chain
a request continues and its memory), ``answer`` (the upstream's answer and the Response
object made from it), ``objects`` (that object's shape), ``stream`` and ``events`` (the
streamed answer), ``routes`` (the routes).
"""

from chatmem.server.responses.answer import ItemIds, read_completion
from chatmem.server.responses.chain import memory_identity
from chatmem.server.responses.objects import FunctionCallItem, ResponseObject
from chatmem.server.responses.request import (
    IGNORED_FIELDS,
    ResponseRequest,
    check_request,
    input_messages,
)
from chatmem.server.responses.routes import router

__all__ = [
    "IGNORED_FIELDS",
    "FunctionCallItem",
    "ItemIds",
    "ResponseObject",
    "ResponseRequest",
    "check_request",
    "input_messages",
    "memory_identity",
    "read_completion",
    "router",
]
