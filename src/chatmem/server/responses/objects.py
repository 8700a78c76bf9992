"""The Response object in OpenAI's shape, and its parts: output items (a message, function
calls), usage, and chatmem's ``memory`` summary."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)


class OutputMessage(BaseModel):
    type: Literal["message"] = "message"
    id: str
    status: Literal["completed", "incomplete"]
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class FunctionCallItem(BaseModel):
    """A tool call of the answer: the client runs the function and sends its result back as
    a ``function_call_output`` item with the same ``call_id``."""

    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["completed", "incomplete"] = "completed"


OutputItem = Annotated[OutputMessage | FunctionCallItem, Field(discriminator="type")]


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class Usage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


class MemorySummary(BaseModel):
    """What memory did for the request (chatmem's addition to the Response object)."""

    outcome: str
    reason: str | None = None
    memories: list[dict[str, Any]] = Field(default_factory=list)


class ResponseObject(BaseModel):
    """An OpenAI Response object (a message, function calls), plus ``memory``."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    completed_at: int | None = None
    status: Literal["completed", "incomplete"]
    error: None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    truncation: Literal["disabled"] = "disabled"
    usage: Usage | None = None
    user: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    memory: MemorySummary


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool = True


__all__ = [
    "DeletedResponse",
    "FunctionCallItem",
    "IncompleteDetails",
    "InputTokensDetails",
    "MemorySummary",
    "OutputItem",
    "OutputMessage",
    "OutputText",
    "OutputTokensDetails",
    "ResponseObject",
    "Usage",
]
