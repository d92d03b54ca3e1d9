"""beacon-rl inside TRL's GRPOTrainer (TRL 1.16 from PyPI): real training steps on CPU with a
tiny randomly initialised Llama built from a config and a word-level tokenizer built here
(nothing is downloaded). A scripted multi-turn rollout_func returns model turns separated
by environment tokens (env_mask 0) and per-turn rewards; the test records the advantages
GRPOTrainer's loss receives and checks they are the crate's, token by token."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")

import beacon_rl  # noqa: E402
from beacon_rl.trl import BeaconGRPOTrainer, token_rewards  # noqa: E402

VOCAB = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(61)]
GENERATIONS = 2


def tiny_tokenizer():
    """A word-level tokenizer over VOCAB (token id = position in VOCAB), built here."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    assert fast.convert_tokens_to_ids("w5") == VOCAB.index("w5")
    return fast


def tiny_model(vocab_size):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config)


class Script:
    """A multi-turn rollout: each completion is turn 1 (2 model tokens), an observation (2
    environment tokens), turn 2 (2 or 3 model tokens). Its first token is a unique id so the
    test can find the completion again after TRL shuffles the batch."""

    def __init__(self):
        self.count = 0
        self.rows = {}  # first token id -> (env_mask, turn_rewards, outcome)

    def __call__(self, prompts, trainer):
        tok = trainer.processing_class
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "turn_rewards": []}
        for prompt in prompts:
            k = self.count
            self.count += 1
            first = VOCAB.index(f"w{k % 40}")
            second = 3 + 40 + (k % 3)
            env = [3 + 50, 3 + 51]
            last = [3 + 45 + (k % 5), 3 + 45 + (k % 7)] + ([3 + 55] if k % 2 else [])
            ids = [first, second] + env + last
            mask = [1, 1, 0, 0] + [1] * len(last)
            turn_rewards = [0.5 if k % 4 in (0, 3) else 0.0, 0.0]  # a milestone on turn 1, or none
            outcome = float(k % 3 == 0)
            self.rows[first] = (mask, turn_rewards, outcome)
            out["prompt_ids"].append(tok(prompt)["input_ids"])
            out["completion_ids"].append(ids)
            out["logprobs"].append([0.0] * len(ids))
            out["env_mask"].append(mask)
            out["turn_rewards"].append(turn_rewards)
        return out

    def reward(self, prompts, completions, completion_ids, **kwargs):
        return [self.rows[ids[0]][2] for ids in completion_ids]


class Recording(BeaconGRPOTrainer):
    """Records what the loss receives (after TRL's shuffling and splitting) and what
    _generate_and_score_completions returned."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []
        self.generated = []

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.generated.append({k: v.clone() for k, v in out.items() if isinstance(v, torch.Tensor)})
        return out

    def _compute_loss(self, model, inputs):
        self.seen.append((inputs["completion_ids"].clone(), inputs["advantages"].clone()))
        return super()._compute_loss(model, inputs)


def make_trainer(tmp_path, estimator, script, **kwargs):
    tok = tiny_tokenizer()
    model = tiny_model(len(VOCAB))
    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=GENERATIONS,
        max_completion_length=12,
        max_steps=2,
        learning_rate=1e-2,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        dataloader_num_workers=0,
    )
    dataset = datasets.Dataset.from_dict({"prompt": [f"w{i} w{i + 1}" for i in range(8)]})
    return Recording(
        model=model,
        processing_class=tok,
        reward_funcs=script.reward,
        args=args,
        train_dataset=dataset,
        rollout_func=script,
        estimator=estimator,
        **kwargs,
    )


def expected(script, firsts, estimator, config=None):
    """The crate's advantages for the completions whose first tokens are ``firsts`` (a
    generation batch in TRL's order: groups of GENERATIONS consecutive rows), from the
    documented token rewards, placed here by hand."""
    rows = [script.rows[f] for f in firsts]
    width = max(len(m) for m, _, _ in rows)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    rewards = np.zeros((len(rows), width), dtype=np.float64)
    for i, (m, turn_rewards, outcome) in enumerate(rows):
        mask[i, : len(m)] = m
        rewards[i, 1] += turn_rewards[0]  # end of turn 1 (tokens 0-1)
        rewards[i, len(m) - 1] += turn_rewards[1] + outcome  # end of turn 2
    index = np.arange(len(rows)) // GENERATIONS
    if estimator in beacon_rl.STEP_ESTIMATORS:
        adv, _ = beacon_rl.estimate_turns(estimator, rewards, mask, index, config=config)
    else:
        adv, _ = beacon_rl.estimate(estimator, rewards, mask, index, config=config)
    return adv, mask


@pytest.mark.parametrize("estimator", ["beacon", "beacon_official", "rloo"])
def test_the_trainer_trains_on_the_crates_advantages(tmp_path, estimator):
    script = Script()
    trainer = make_trainer(tmp_path, estimator, script)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    after = list(trainer.model.parameters())
    assert trainer.state.global_step == 2
    assert any(not torch.equal(b, a.detach()) for b, a in zip(before, after)), "no optimizer step changed the model"
    assert trainer.generated, "no generation batch"
    checked = 0
    for gen in trainer.generated:
        firsts = gen["completion_ids"][:, 0].tolist()
        want, mask = expected(script, firsts, estimator)
        got = gen["advantages"]
        assert got.shape[0] == len(firsts) and got.dim() == 2
        w = mask.shape[1]
        assert torch.allclose(got[:, :w].double(), torch.from_numpy(want), rtol=0, atol=1e-6)
        assert (got[:, w:] == 0).all()
        # Environment tokens get no credit.
        assert (got[:, :w][torch.from_numpy(mask) == 0] == 0).all()
        lookup = {f: got[i] for i, f in enumerate(firsts)}
        for ids, adv in trainer.seen:
            for row in range(ids.shape[0]):
                first = int(ids[row, 0])
                if first in lookup:
                    assert torch.equal(adv[row], lookup[first])
                    checked += 1
    assert checked >= 8, checked
    if estimator == "beacon_official":
        # Turn-level credit: the two turns of a completion differ somewhere.
        assert any((g["advantages"][:, 0] != g["advantages"][:, 4]).any() for g in trainer.generated)
    assert any(h.get("beacon_rl/rows_left_out") == 0 for h in trainer.state.log_history)


def test_beacon_needs_turn_rewards_unless_told_there_are_none(tmp_path):
    script = Script()
    trainer = make_trainer(tmp_path, "beacon", script)
    with pytest.raises(ValueError, match="reads milestones from per-turn rewards.*turn_rewards_key=None"):
        trainer._turn_rewards([{"prompt": "w1"}, {"prompt": "w2"}])
    trainer.beacon_turn_rewards_key = None
    assert trainer._turn_rewards([{"prompt": "w1"}]) is None
    with pytest.raises(ValueError, match="unknown name 'nope'"):
        make_trainer(tmp_path, "nope", Script())
    with pytest.raises(ValueError):
        make_trainer(tmp_path, "beacon", Script(), estimator_config={"segment_weight": -1.0})


def test_token_rewards_place_the_convention_by_hand():
    mask = np.array([[1, 1, 0, 1, 1, 0], [1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    rewards = np.array([1.0, 0.0, 1.0])
    out, included = token_rewards(rewards, mask, [[0.5, 0.25], [0.75], [1.0]])
    assert out.tolist() == [
        [0, 0.5, 0, 0, 1.25, 0],
        [0, 0, 0.75, 0, 0, 0],
        [0, 0, 0, 0, 0, 0],
    ]
    assert included.tolist() == [True, True, False]  # row 2 has no trained token
    out, included = token_rewards(np.array([np.nan]), mask[:1])
    assert not included[0] and not out.any()  # unscorable
    with pytest.raises(ValueError, match="completion 0 has 2 turns .* but 1 turn rewards"):
        token_rewards(rewards[:1], mask[:1], [[1.0]])
    with pytest.raises(ValueError, match="non-finite"):
        token_rewards(rewards[:1], mask[:1], [[1.0, float("inf")]])
