#!/usr/bin/env python3
"""Build the tiny model shipped in python/shakedown/models/tiny/.

The tokenizer is a byte-level BPE trained here on text this script writes itself
(sentences from the word lists below, JSON tool calls, numbers), so the package
carries no third-party vocabulary. Needs the `tokenizers` package (a dev tool only:
the package reads the result with its own Rust core). Deterministic: running it
again gives byte-identical files.

usage: python tools/build_tiny_model.py [OUT_DIR]
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 2048
CONTEXT = 4096

# Ids 0.. in this order; <think> and <tool_call> markers are what the parsers look for.
SPECIAL = [
    "<|bos|>",
    "<|eos|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tool|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tools>",
    "</tools>",
]
# Added tokens the parsers read: kept by a decoder that skips special tokens.
PARSER_MARKERS = {"<think>", "</think>", "<tool_call>", "</tool_call>"}
BOS, EOS = SPECIAL[0], SPECIAL[1]

SUBJECTS = [
    "The user",
    "The assistant",
    "A friend",
    "My team",
    "The weather service",
    "She",
    "He",
    "We",
    "They",
    "Everyone",
    "The tool",
    "This model",
    "The worker",
    "The endpoint",
]
VERBS = [
    "wants",
    "asks for",
    "needs",
    "checks",
    "reads",
    "writes",
    "calls",
    "finds",
    "returns",
    "explains",
    "plans",
    "knows",
    "likes",
    "sends",
    "gets",
    "shows",
    "answers",
    "helps with",
]
OBJECTS = [
    "the weather",
    "the time",
    "a short answer",
    "the forecast",
    "a tool call",
    "the result",
    "the temperature",
    "a summary",
    "the next step",
    "the city",
    "some help",
    "the news",
    "an example",
    "the question",
    "the request",
    "the reply",
    "a plan",
    "the data",
]
ENDINGS = [
    "today.",
    "right now.",
    "in Paris.",
    "in Tokyo.",
    "in Berlin.",
    "for tomorrow.",
    "before lunch.",
    "after the meeting.",
    "this week.",
    "again.",
    "quickly.",
    "carefully.",
]
CITIES = [
    "Paris",
    "Tokyo",
    "Berlin",
    "London",
    "Madrid",
    "Rome",
    "Oslo",
    "Lima",
    "Cairo",
    "Sydney",
    "Toronto",
    "Mumbai",
    "Seoul",
    "Vienna",
    "Prague",
    "Dublin",
    "Lisbon",
]
TOOLS = ["get_weather", "get_time", "search", "lookup", "calculate", "send_email", "get_forecast"]
KEYS = ["city", "tz", "query", "unit", "days", "to", "subject", "expression", "location"]
WORDS = """
about above across action add after again against age ago agree air all allow almost alone along
already also always among amount and animal another answer any appear apple area argue arm around
arrive art ask at autumn away baby back bad bag ball bank base be bear beat beautiful because become
bed before begin behind believe bell below best better between big bird black blue board boat body
book born both bottom box boy bread break bright bring brother brown build burn busy but buy by call
came can capital captain car card care carry case cat catch cause cell center century certain chair
chance change character charge chart check child choose church circle class clean clear climb clock
close cloud coast cold collect colony color column come common company compare complete condition
connect consider contain continue control cook cool copy corn corner correct cost cotton could count
country course cover cow create crop cross crowd cry current cut dance dark day dead deal dear death
decide decimal deep degree depend describe desert design detail develop dictionary differ difficult
direct discuss distant divide doctor dog dollar door double down draw dream dress drink drive drop dry
duck during each ear early earth ease east eat edge effect egg eight either electric element else end
enemy energy engine enough enter equal error even evening event ever every exact example except
excite exercise expect experience experiment eye face fact fair fall family famous far farm fast
father favor fear feed feel feet field fight figure fill final fine finger finish fire first fish fit
five flat floor flow flower fly follow food foot force forest form forward found four free fresh
friend front fruit full fun game garden gas gather gentle girl give glad glass go gold gone good govern
grand grass gray great green ground group grow guess guide gun hair half hand happen happy hard hat
have head hear heard heart heat heavy help here high hill history hold hole home hope horse hot hour
house huge human hundred hunt hurry ice idea imagine inch include indicate industry insect instant
instrument interest invent iron island job join joy jump keep key kill kind king kitchen knew land
language large last late laugh law lay lead learn leave left leg length less letter level lie life
lift light line liquid list listen little live long look lost loud love low machine magnet main major
make man many map mark market mass master match material matter may meant measure meat meet melody
memory metal method middle might mile milk million mind minute miss modern molecule moment money
month moon morning mother motion mount mountain mouth move much music must name nation natural nature
near necessary neck need neighbor never new next night nine noise noon north nose note nothing notice
noun now number object observe occur ocean offer office often oil old once one only open operate
opposite order organ original other oxygen page paint pair paper paragraph parent part party pass
past path pattern pay people perhaps period person phrase pick picture piece place plain plane planet
plant play please plural poem point poor populate port pose position possible pound power practice
prepare present press pretty print probable problem process produce product proper property protect
prove provide pull push quart question quick quiet quite quotient race radio rail rain raise range
rather reach ready real reason receive record region remember repeat reply represent require rest
result rich ride right ring rise river road rock roll room root rope rose round row rub rule run safe
sail salt same sand save say scale school science score sea season seat second section see seed seem
segment select self sell sense sentence separate serve set settle seven several shape share sharp
sheet shell shine ship shoe shop shore short should shoulder shout side sight sign silent silver
simple since sing single sister sit six size skill skin sky sleep slow small smell smile snow soft
soil soldier solution solve song soon sound south space speak special speech speed spell spend spoke
spot spread spring square stand star start state station stay stead steam steel step stick still
stone stood stop store story straight strange stream street stretch string strong student study
subject substance success sudden sugar suggest suit summer sun supply support sure surface surprise
swim syllable symbol system table tail take talk tall teach team teeth tell ten term test than thank
thick thin thing think third though thought thousand three through throw tie tiny tire together told
tone tool top total touch toward town track trade train travel tree triangle trip trouble truck true
try tube turn twenty type under unit until upon use usual valley value various verb very view village
visit voice vowel wait walk wall warm wash watch water wave way wear week weight west wheel where
whether which while white whole why wide wife wild will win wind window wing winter wire wish with
woman wonder wood word work world would write wrong yard year yellow yes yet young
"""

PROSE = """
Hello there! How can I help you today? Sure, let me check that for you.
I should look up the weather before I answer. The user greets me and asks a question.
Let me think about this step by step. First, find the city. Then call the tool.
Here is the answer you asked for. Thank you for waiting. Is there anything else?
It is sunny and warm, with a light breeze from the west. Rain is expected later.
The temperature is 21 degrees Celsius. The time is 10:30 in the morning.
I will call the get_weather function with the city name as its argument.
Plain answer without any special tags. No tool is needed for this question.
Good morning, good afternoon, good evening, and good night. Yes, no, maybe.
This is a small model for tests: it has a tokenizer, a chat template and no weights.
"""


def corpus() -> list[str]:
    lines = [line for line in PROSE.strip().splitlines()]
    for subject, verb, obj, ending in itertools.product(SUBJECTS, VERBS, OBJECTS, ENDINGS[:4]):
        lines.append(f"{subject} {verb} {obj} {ending}")
    for tool, key, city in itertools.product(TOOLS, KEYS, CITIES):
        call = json.dumps({"name": tool, "arguments": {key: city}})
        lines.append(f"<tool_call>{call}</tool_call>")
        lines.append(f"<think>The user wants {key} for {city}.</think>Sure.")
    words = WORDS.split()
    lines.extend(" ".join(words[i : i + 12]) for i in range(0, len(words), 12))
    lines.extend(" ".join(words[i : i + 12]).capitalize() + "." for i in range(6, len(words), 12))
    lines.extend(f"{n} {n * 7} {n / 4} {-n}" for n in range(50))
    return lines


CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}<|system|>You may call these tools. To call one, write "
    '<tool_call>{"name": <name>, "arguments": <object>}</tool_call>.\n<tools>\n'
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.content is string %}{% set content = message.content %}"
    "{% elif message.content %}{% set content = message.content | map(attribute='text') | join('') %}"
    "{% else %}{% set content = '' %}{% endif %}"
    "{% if message.role == 'system' or message.role == 'developer' %}<|system|>{{ content }}\n"
    "{% elif message.role == 'user' %}<|user|>{{ content }}\n"
    "{% elif message.role == 'assistant' %}<|assistant|>"
    "{% if message.reasoning_content %}<think>{{ message.reasoning_content }}</think>{% endif %}"
    "{{ content }}"
    "{% if message.tool_calls %}{% for call in message.tool_calls %}"
    '<tool_call>{"name": "{{ call.function.name }}", "arguments": '
    "{% if call.function.arguments is string %}{{ call.function.arguments }}"
    "{% else %}{{ call.function.arguments | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}{% endif %}{{ eos_token }}\n"
    "{% elif message.role == 'tool' %}<|tool|><tool_response>{{ content }}</tool_response>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    # Compact but stable JSON: sorted vocab order is the id order the trainer gave.
    tokenizer_json = json.loads(tokenizer.to_str())
    # The parsers' markers are text, as in real models' tokenizers (Qwen, DeepSeek R1):
    # a frontend that skips special tokens (Dynamo's default) must still see them.
    for added in tokenizer_json["added_tokens"]:
        if added["content"] in PARSER_MARKERS:
            added["special"] = False
    (out / "tokenizer.json").write_text(
        json.dumps(tokenizer_json, ensure_ascii=False, separators=(",", ":")) + "\n",
        encoding="utf-8",
    )
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    bos_id, eos_id = tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 16,
        "max_position_embeddings": CONTEXT,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "torch_dtype": "bfloat16",
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": CONTEXT,
        "chat_template": CHAT_TEMPLATE,
    }
    generation_config = {"bos_token_id": bos_id, "eos_token_id": eos_id}
    for name, data in [
        ("config.json", config),
        ("tokenizer_config.json", tokenizer_config),
        ("generation_config.json", generation_config),
    ]:
        (out / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    default = Path(__file__).resolve().parent.parent / "python/shakedown/models/tiny"
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else default)
