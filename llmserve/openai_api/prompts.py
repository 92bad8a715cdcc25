"""From a validated request to the text the ensemble gets, its exact token count and its budget.

Chat messages go through the checkpoint's own chat template (transformers' `apply_chat_template`,
tokenizer loaded from local files only), then reach the ensemble with `apply_chat_template=false`:
the template is applied once, here, for any number of turns and roles. The prompt is counted with
the same tokenizer call preprocessing makes for a raw prompt (`add_special_tokens` from the spec),
so `usage.prompt_tokens` is the number of tokens the engine prefills."""

from __future__ import annotations

from dataclasses import dataclass, field

from jinja2 import TemplateError

from ..text.tokenizer import load_hf_tokenizer
from .errors import bad_request
from .protocol import ChatCompletionRequest, CompletionRequest
from .tools import Reply, template_turns


@dataclass(frozen=True)
class Limits:
    max_input_len: int
    max_output_len: int
    default_max_tokens: int


@dataclass
class Prompt:
    text: str
    """What the ensemble gets as text_input (apply_chat_template=false)."""
    tokens: int
    max_tokens: int
    min_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    """`text` tokenized as preprocessing tokenizes it: what the token-level path sends as input_ids."""


class PromptBuilder:
    def __init__(
        self, tokenizer_dir: str, limits: Limits, *, add_special_tokens: bool = False, trust_remote_code: bool = False
    ):
        self.tok = load_hf_tokenizer(tokenizer_dir, trust_remote_code)
        # Counting goes to the Rust tokenizer itself: the same ids as `tok(text)` (which calls it), without
        # transformers' BatchEncoding around them, a third of the time of a 128-token prompt.
        self._encoder = self.tok.backend_tokenizer
        self.limits, self.add_special_tokens = limits, add_special_tokens
        self.has_chat_template = bool(self.tok.chat_template)
        # No token stands for more UTF-8 bytes than its vocabulary string has, so a prompt longer
        # than this cannot fit max_input_len tokens: refuse it before tokenizing (as preprocessing does).
        longest = max((len(t.encode("utf-8")) for t in self.tok.get_vocab()), default=1)
        self.max_prompt_bytes = limits.max_input_len * max(1, longest)

    def render_chat(self, req: ChatCompletionRequest, reply: Reply) -> str:
        if not self.has_chat_template:
            raise bad_request("messages", "this model has no chat template; use /v1/completions")
        # OpenAI's "developer" role is the newer name of "system"; templates know "system". Tools,
        # earlier calls and tool results as tools.py says.
        turns, tools = template_turns(req, reply, self.tok.chat_template)
        try:
            return self.tok.apply_chat_template(turns, tools=tools, tokenize=False, add_generation_prompt=True)
        except TemplateError as e:  # a template may refuse an order of roles (its raise_exception)
            raise bad_request("messages", f"the model's chat template refused these messages: {e}") from None

    def encode(self, text: str) -> list[int]:
        return self._encoder.encode(text, add_special_tokens=self.add_special_tokens).ids

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def build(self, req: ChatCompletionRequest | CompletionRequest, reply: Reply | None = None) -> list[Prompt]:
        """One Prompt per prompt of the request (a chat has one; /v1/completions takes a list)."""
        if isinstance(req, ChatCompletionRequest):
            return [self._build(req, self.render_chat(req, reply or Reply("text")), "messages")]
        texts = req.prompt_texts()
        return [self._build(req, t, "prompt" if len(texts) == 1 else f"prompt[{i}]") for i, t in enumerate(texts)]

    def _build(self, req: ChatCompletionRequest | CompletionRequest, text: str, where: str) -> Prompt:
        if where != "messages" and not text.strip():
            raise bad_request(where, "the prompt must not be empty")
        if any(w == "" for w in req.stop_words()):
            raise bad_request("stop", "stop sequences must not be empty")
        lim = self.limits
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > self.max_prompt_bytes:
            raise bad_request(
                where,
                f"The prompt is {size} bytes, longer than any prompt of at most {lim.max_input_len} tokens.",
                code="context_length_exceeded",
            )
        ids = self.encode(text)
        n = len(ids)
        if n > lim.max_input_len:
            raise bad_request(
                where,
                f"This model's maximum prompt length is {lim.max_input_len} tokens; this prompt has {n} tokens.",
                code="context_length_exceeded",
            )
        asked, name = req.requested_max_tokens()
        max_tokens = lim.default_max_tokens if asked is None else asked
        if not 1 <= max_tokens <= lim.max_output_len:
            raise bad_request(name, f"'{name}' must be in [1, {lim.max_output_len}], got {max_tokens}")
        min_tokens = max_tokens if req.ignore_eos else req.min_tokens
        if min_tokens is not None and min_tokens > max_tokens:
            raise bad_request("min_tokens", f"'min_tokens' ({min_tokens}) must not exceed {name} ({max_tokens})")
        return Prompt(text=text, tokens=n, max_tokens=max_tokens, min_tokens=min_tokens, stop=req.stop_words(), ids=ids)
