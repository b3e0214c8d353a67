# The pipeline as a Makefile: tokenize each input (one job per file: make -j N), split each token
# shard into train/valid, pack both at SEQ_LEN per dataset, then train. Every target is a file, so
# `make` after a change redoes only what depends on it, and a killed `make` is simply rerun (loom
# writes atomically: an output is complete or absent).
#
#   make -f scripts/pipeline.mk -j 4 INPUT_DIR=data MODEL=tok.model OUT=out CONFIG=run.ini SEQ_LEN=2048
#   make -f scripts/pipeline.mk INPUTS="data/a.jsonl.zst data/b.txt" ...     (a list instead of a folder)
#   make -f scripts/pipeline.mk INPUT_DIR=corpus WEIGHTS=web:3,code:1 MIXTURE=proportional ...
#
# Each input of two or more documents gives validation at least MIN_VALID_DOCS (1) of them, those
# nearest VALID_FRACTION's cut (loom-pack split --min-valid-docs): a small input would otherwise
# give it none, at one SEED for every input. An input that reaches the minimum by itself splits as
# without it. Splits made before are kept (make tracks files, not variables): remove OUT/split to
# redo them.
# A split can still leave a side without documents (an input of one document, or MIN_VALID_DOCS=0
# and a small input whose every document went to train, or every one to valid at VALID_FRACTION=1):
# split writes no shard for that side (a shard has at least one document), the split's
# stamp OUT/split/DATASET/NAME.split records that the input was split, and the packs take the sides
# that exist. A dataset without any valid document is not validated (its stale valid packs removed;
# loom-train gets no valid folder when no dataset has one); one without any train document is an error.
#
# Datasets: each sub-folder of INPUT_DIR is one named dataset (corpus/web/**, corpus/code/** ->
# datasets web and code), packed apart (OUT/packed/train/web, OUT/packed/valid/web, ...), so training
# weighs them (WEIGHTS -> data.dataset_weights "name:weight,...", MIXTURE -> data.mixture: scaled, a
# multiple of the dataset's size per epoch, or proportional, its share of every batch; docs/TRAIN.md
# "Data mixtures") and validation reports each one (val/web_loss, val/code_loss). Inputs directly in
# INPUT_DIR, or given as INPUTS, form the dataset `all`. Input names must differ within a dataset.
# A dataset whose folder is removed keeps its packs in OUT/packed: remove them too (or weigh it 0).
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
MIN_VALID_DOCS ?= 1
THREADS      ?= 1
STEPS        ?= $(shell sed -n 's/^[[:space:]]*total_steps[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' $(CONFIG))
TRAIN_ARGS   ?=
ON_RESUME    ?=
WEIGHTS      ?=
MIXTURE      ?=

ifeq ($(strip $(STEPS)),)
$(error STEPS: $(CONFIG) has no data.total_steps; give STEPS=N)
endif

# NAME.EXT[.gz|.zst] -> NAME; a shard is complete when its .meta exists (loom renames it last).
# An input's dataset: the first folder below INPUT_DIR, else `all`.
name_of = $(basename $(basename $(basename $(notdir $(1)))))
INPUT_ROOT := $(patsubst %/,%,$(INPUT_DIR))
rel_of  = $(patsubst $(INPUT_ROOT)/%,%,$(1))
ds_of   = $(if $(INPUT_DIR),$(if $(findstring /,$(call rel_of,$(1))),$(firstword $(subst /, ,$(call rel_of,$(1)))),all),all)
id_of   = $(call ds_of,$(1))/$(call name_of,$(1))
DATASETS := $(sort $(foreach f,$(INPUTS),$(call ds_of,$(f))))
TOKENS  := $(foreach f,$(INPUTS),$(OUT)/tokens/$(call id_of,$(f)).bin.meta)
# A dataset's split stamps; and, as shell, the split shards of one side that exist (a recipe runs it
# after its prerequisites, the splits, are made).
split_of = $(foreach f,$(INPUTS),$(if $(filter $(1),$(call ds_of,$(f))),$(OUT)/split/$(1)/$(call name_of,$(f)).split))
sides_sh = for f in $(strip $(foreach f,$(INPUTS),$(if $(filter $(1),$(call ds_of,$(f))),$(OUT)/split/$(1)/$(2)/$(call name_of,$(f)).bin))); \
           do [ ! -e $$f.meta ] || echo $$f; done
SPLIT   := $(foreach d,$(DATASETS),$(call split_of,$(d)))
PACKED_TRAIN := $(foreach d,$(DATASETS),$(OUT)/packed/train/$(d)/packed.bin.meta)
# A dataset's valid packs are optional (no valid document, no packs), so their target is a stamp.
PACKED_VALID := $(foreach d,$(DATASETS),$(OUT)/packed/valid/$(d).packed)
FINAL   := $(OUT)/run/checkpoints/step_$(STEPS)

.PHONY: all tokens split pack train
all: train
tokens: $(TOKENS)
split: $(SPLIT)
pack: $(PACKED_TRAIN) $(PACKED_VALID)
train: $(FINAL)

# One tokenize job per input, then its shard split by document (deterministic in SEED; split checks
# the shard's checksums as it reads, and removes a side's old shard when that side is now empty).
# The stamp is touched only after split succeeded: a failed or killed split is redone.
define input_rules
$(OUT)/tokens/$(call id_of,$(1)).bin.meta: $(1) $(MODEL)
	$(BIN)/tokenize/loom-tokenize --model $(MODEL) --output-dir $(OUT)/tokens/$(call ds_of,$(1)) --threads $(THREADS) $(1)
$(OUT)/split/$(call id_of,$(1)).split: $(OUT)/tokens/$(call id_of,$(1)).bin.meta
	$(BIN)/packer/loom-pack split --valid-fraction $(VALID_FRACTION) --min-valid-docs $(MIN_VALID_DOCS) --seed $(SEED) \
	  --output-dir $(OUT)/split/$(call ds_of,$(1)) $(OUT)/tokens/$(call id_of,$(1)).bin
	touch $$@
endef
$(foreach f,$(INPUTS),$(eval $(call input_rules,$(f))))

# SEQ_LEN, WEIGHTS and MIXTURE as files that change only when their value does (written as the
# Makefile is read, so that `make -q` can answer): the packs depend on the first, training on all.
$(shell mkdir -p $(OUT) && [ "$$(cat $(OUT)/seq_len 2>/dev/null)" = "$(SEQ_LEN)" ] || echo $(SEQ_LEN) > $(OUT)/seq_len)
$(shell [ "$$(cat $(OUT)/mixture 2>/dev/null)" = "$(WEIGHTS) $(MIXTURE)" ] || echo "$(WEIGHTS) $(MIXTURE)" > $(OUT)/mixture)

# Each dataset packed apart, train and valid, from the sides its splits wrote. The valid stamp is
# touched after its packs are written, or after the old ones are removed when there is nothing to pack.
define dataset_rules
$(OUT)/packed/train/$(1)/packed.bin.meta: $(call split_of,$(1)) $(OUT)/seq_len
	ins=$$$$($$(call sides_sh,$(1),train)); [ -n "$$$$ins" ] || { echo "dataset $(1): no training document: every \
	  document of $(OUT)/split/$(1) went to validation (VALID_FRACTION=$(VALID_FRACTION), SEED=$(SEED)); \
	  lower VALID_FRACTION or give the dataset more documents" >&2; exit 1; }; \
	$(BIN)/packer/loom-pack pack --seq-len $(SEQ_LEN) --strategy bestfit --seed $(SEED) \
	  --output-dir $(OUT)/packed/train/$(1) $$$$ins
$(OUT)/packed/valid/$(1).packed: $(call split_of,$(1)) $(OUT)/seq_len
	ins=$$$$($$(call sides_sh,$(1),valid)); if [ -n "$$$$ins" ]; then \
	  $(BIN)/packer/loom-pack pack --seq-len $(SEQ_LEN) --strategy concat --output-dir $(OUT)/packed/valid/$(1) $$$$ins; \
	else rm -f $(OUT)/packed/valid/$(1)/packed.bin.meta $(OUT)/packed/valid/$(1)/packed.bin && \
	  echo "dataset $(1): no validation document (VALID_FRACTION=$(VALID_FRACTION)): not validated"; fi
	mkdir -p $(OUT)/packed/valid && touch $$@
endef
$(foreach d,$(DATASETS),$(eval $(call dataset_rules,$(d))))

# The final checkpoint. --resume auto continues the run from its newest checkpoint (fresh only when
# there is none); when that checkpoint is already the final one nothing is trained, and the touch
# marks the target as made from the current packs. A run that ends without it (stopped by a signal
# or the stop file, or already past STEPS) fails the target: a touch would make an empty file
# stand for the checkpoint.
# No dataset with valid packs: no validation (an empty data.valid_folder).
$(FINAL): $(PACKED_TRAIN) $(PACKED_VALID) $(CONFIG) $(OUT)/mixture
	$(BIN)/trainer/loom-train --config $(CONFIG) --resume auto --job.run_dir=$(OUT)/run \
	  --data.train_folder=$(OUT)/packed/train \
	  --data.valid_folder=$$(ls $(OUT)/packed/valid/*/packed.bin.meta >/dev/null 2>&1 && echo $(OUT)/packed/valid) \
	  --data.seq_len=$(SEQ_LEN) --data.total_steps=$(STEPS) $(if $(ON_RESUME),--lr_scheduler.on_resume=$(ON_RESUME)) \
	  $(if $(WEIGHTS),--data.dataset_weights=$(WEIGHTS)) $(if $(MIXTURE),--data.mixture=$(MIXTURE)) $(TRAIN_ARGS)
	@[ -d $@ ] || { echo "$@: loom-train ended without this checkpoint (stopped before step $(STEPS), or the run" \
	  "is already past it: its newest is $$(cat $(OUT)/run/checkpoints/latest 2>/dev/null)); run make again to" \
	  "continue, or give STEPS the run's length" >&2; exit 1; }
	touch $@
