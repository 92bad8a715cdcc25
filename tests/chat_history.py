"""Chat histories the OpenAI tests send (unit and server tests alike)."""

from __future__ import annotations


def tool_round(call_id: str, name: str, arguments: str, result: str) -> list[dict]:
    """One tool round of a chat history: the assistant's turn that called `name` with `arguments` (a
    JSON string, as the API carries it), then the tool's answer."""
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]
