"""Make the server lab's preprocessed dataset: what `speculators prepare-data` writes, from local text.

Runs in the server lab venv:  python make_dataset.py MODEL_DIR OUT_DIR
Rows hold ``input_ids`` (the model's tokenizer, BOS first), ``loss_mask`` and ``seq_len``, in torch format, saved
with ``datasets``' save_to_disk — the folder `speculators generate-offline-data --preprocessed-data` reads.
"""

import sys

TEXTS = [
    "The quick brown fox jumps over the lazy dog while the engineers wait for the model to load.",
    "Hidden states from intermediate layers train the EAGLE draft model for speculative decoding.",
    "Every release of the inference engine renames a method, removes a keyword or changes a shape.",
    "A long job on a GPU host dies twenty minutes in, and somebody reads the traceback again.",
    "Verified output means the right shapes and values that match a reference forward pass.",
    "The server keeps the model loaded; the client asks it for hidden states over HTTP.",
]


def main() -> int:
    model_dir, out_dir = sys.argv[1], sys.argv[2]
    from datasets import Dataset
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
    for text in TEXTS:
        ids = [tok.bos_token_id, *tok(text, add_special_tokens=False)["input_ids"]]
        rows["input_ids"].append(ids)
        rows["loss_mask"].append([0] + [1] * (len(ids) - 1))
        rows["seq_len"].append(len(ids))
    dataset = Dataset.from_dict(rows)
    dataset.set_format(type="torch")
    dataset.save_to_disk(out_dir)
    print(f"{len(dataset)} rows written to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
