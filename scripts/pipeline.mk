# The pipeline as a Makefile: tokenize each input (one job per file: make -j N), split each token
# shard into train/valid, pack both at SEQ_LEN, then train. Every target is a file, so `make` after
# a change redoes only what depends on it, and a killed `make` is simply rerun (loom writes
# atomically: an output is complete or absent).
#
#   make -f scripts/pipeline.mk -j 4 INPUT_DIR=data MODEL=tok.model OUT=out CONFIG=run.ini SEQ_LEN=2048
#   make -f scripts/pipeline.mk INPUTS="data/a.jsonl.zst data/b.txt" ...     (a list instead of a folder)
#
# train's target is the run's final checkpoint, OUT/run/checkpoints/step_STEPS (STEPS: the config's
# data.total_steps unless given), and loom-train runs with --resume auto: after a change (new
# data, more STEPS) training continues from the run's newest checkpoint, never from scratch.
# More STEPS changes the learning-rate schedule, which loom-train refuses to do silently: give
# ON_RESUME=apply (the new schedule from the resumed step; the lr before and after is logged) or
# ON_RESUME=keep (the old one; past its end the lr holds eta_min). A run meant to be extended is
# best run with `kind = wsd` under [lr_scheduler] in CONFIG: it holds the base lr until its last
# decay_ratio of steps, so extending it before the decay changes no lr already taken or next.
# SEQ_LEN is recorded in OUT/seq_len, so changing it repacks (and trains on the new packs).
# Defaults run the demo's data through the demo model and config.
BIN          ?= build
MODEL        ?= data_samples/spm_2k.model
INPUT_DIR    ?=
# A folder is walked for NAME.txt|json|jsonl[.gz|.zst], as loom-tokenize walks one.
INPUTS       ?= $(if $(INPUT_DIR),$(sort $(shell find $(INPUT_DIR) -type f \( -name '*.txt' -o -name '*.json' \
                  -o -name '*.jsonl' -o -name '*.txt.gz' -o -name '*.json.gz' -o -name '*.jsonl.gz' -o -name '*.txt.zst' \
                  -o -name '*.json.zst' -o -name '*.jsonl.zst' \))),data_samples/botchan_head.txt \
                  data_samples/botchan_tail.json data_samples/neko_head.jsonl.gz)
OUT          ?= out/pipeline
CONFIG       ?= configs/demo.ini
SEQ_LEN      ?= 256
SEED         ?= 1
VALID_FRACTION ?= 0.05
THREADS      ?= 1
STEPS        ?= $(shell sed -n 's/^[[:space:]]*total_steps[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' $(CONFIG))
TRAIN_ARGS   ?=
ON_RESUME    ?=

ifeq ($(strip $(STEPS)),)
$(error STEPS: $(CONFIG) has no data.total_steps; give STEPS=N)
endif

# NAME.EXT[.gz|.zst] -> NAME; a shard is complete when its .meta exists (loom renames it last).
name_of = $(basename $(basename $(basename $(notdir $(1)))))
NAMES   := $(foreach f,$(INPUTS),$(call name_of,$(f)))
TOKENS  := $(foreach n,$(NAMES),$(OUT)/tokens/$(n).bin.meta)
TRAIN_SPLIT := $(foreach n,$(NAMES),$(OUT)/split/train/$(n).bin.meta)
VALID_SPLIT := $(foreach n,$(NAMES),$(OUT)/split/valid/$(n).bin.meta)
PACKED_TRAIN := $(OUT)/packed/train/all/packed.bin.meta
PACKED_VALID := $(OUT)/packed/valid/all/packed.bin.meta
FINAL   := $(OUT)/run/checkpoints/step_$(STEPS)

.PHONY: all tokens split pack train
all: train
tokens: $(TOKENS)
split: $(TRAIN_SPLIT) $(VALID_SPLIT)
pack: $(PACKED_TRAIN) $(PACKED_VALID)
train: $(FINAL)

# One tokenize job per input.
define tokenize_rule
$(OUT)/tokens/$(call name_of,$(1)).bin.meta: $(1) $(MODEL)
	$(BIN)/tokenize/loom-tokenize --model $(MODEL) --output-dir $(OUT)/tokens --threads $(THREADS) $(1)
endef
$(foreach f,$(INPUTS),$(eval $(call tokenize_rule,$(f))))

# Each shard split by document (deterministic in SEED); split checks the shard's checksums as it reads.
$(OUT)/split/train/%.bin.meta $(OUT)/split/valid/%.bin.meta &: $(OUT)/tokens/%.bin.meta
	$(BIN)/packer/loom-pack split --valid-fraction $(VALID_FRACTION) --seed $(SEED) --output-dir $(OUT)/split \
	  $(OUT)/tokens/$*.bin

# SEQ_LEN as a file that changes only when the value does (written as the Makefile is read, so that
# `make -q` can answer): the packs depend on it.
$(shell mkdir -p $(OUT) && [ "$$(cat $(OUT)/seq_len 2>/dev/null)" = "$(SEQ_LEN)" ] || echo $(SEQ_LEN) > $(OUT)/seq_len)

$(PACKED_TRAIN): $(TRAIN_SPLIT) $(OUT)/seq_len
	$(BIN)/packer/loom-pack pack --seq-len $(SEQ_LEN) --strategy bestfit --seed $(SEED) \
	  --output-dir $(OUT)/packed/train/all $(TRAIN_SPLIT:.meta=)

$(PACKED_VALID): $(VALID_SPLIT) $(OUT)/seq_len
	$(BIN)/packer/loom-pack pack --seq-len $(SEQ_LEN) --strategy concat \
	  --output-dir $(OUT)/packed/valid/all $(VALID_SPLIT:.meta=)

# The final checkpoint. --resume auto continues the run from its newest checkpoint (fresh only when
# there is none); when that checkpoint is already the final one nothing is trained, and the touch
# marks the target as made from the current packs.
$(FINAL): $(PACKED_TRAIN) $(PACKED_VALID) $(CONFIG)
	$(BIN)/trainer/loom-train --config $(CONFIG) --resume auto --job.run_dir=$(OUT)/run \
	  --data.train_folder=$(OUT)/packed/train --data.valid_folder=$(OUT)/packed/valid \
	  --data.seq_len=$(SEQ_LEN) --data.total_steps=$(STEPS) $(if $(ON_RESUME),--lr_scheduler.on_resume=$(ON_RESUME)) \
	  $(TRAIN_ARGS)
	touch $@
