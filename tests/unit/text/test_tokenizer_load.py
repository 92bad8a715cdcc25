"""load_hf_tokenizer: the generic fast tokenizer is loaded without AutoTokenizer (and so without torch),
and is the same tokenizer AutoTokenizer gives."""

import json
import subprocess
import sys

from llmserve.text.tokenizer import load_hf_tokenizer, tokenizer_class

PROMPTS = ["Hello, world!", "  leading spaces\tand tabs\n\n", "émoji 🤖 and 中文", "<|im_start|>user\nhi<|im_end|>"]


def test_the_generic_tokenizer_is_the_one_autotokenizer_gives(smollm2_dir):
    from transformers import AutoTokenizer

    ours, auto = load_hf_tokenizer(str(smollm2_dir)), AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True)
    assert type(ours) is type(auto)
    assert [ours(p)["input_ids"] for p in PROMPTS] == [auto(p)["input_ids"] for p in PROMPTS]
    assert (ours.eos_token_id, ours.pad_token_id, ours.all_special_ids) == (
        auto.eos_token_id,
        auto.pad_token_id,
        auto.all_special_ids,
    )
    chat = [{"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == auto.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    )


def test_loading_the_generic_tokenizer_does_not_import_torch(smollm2_dir):
    code = (
        "import sys; from llmserve.text.tokenizer import load_hf_tokenizer; "
        f"load_hf_tokenizer({str(smollm2_dir)!r}); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_tokenizer_with_code_of_its_own_goes_to_autotokenizer(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "TokenizersBackend", "auto_map": {"AutoTokenizer": ["x.Tok", None]}})
    )
    assert tokenizer_class(str(tmp_path)) is None
    assert tokenizer_class(str(tmp_path / "missing")) is None
