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
#
# DEDUP=1 (default off: the rules above, unchanged) puts loom-dedup (docs/DEDUP.md) between tokenize
# and split: exact and near duplicates, and with DEDUP_EVAL documents overlapping evaluation texts,
# are removed before anything is split, packed or trained on.
#   make -f scripts/pipeline.mk DEDUP=1 DEDUP_REFERENCES="old/tokens" DEDUP_EVAL="mmlu.jsonl gsm8k.jsonl" \
#     DEDUP_FLAGS="--verify=true --keep none" ...
# DEDUP_REFERENCES: paths given as --reference (shards or folders: matched against, never written),
# DEDUP_EVAL: files given as --eval, tokenized with MODEL; DEDUP_FLAGS: more loom-dedup options.
# One loom-dedup runs over every dataset's token shards together, so a copy is found whichever
# datasets hold it (a web page quoting a code file): the kept copy is the first in dataset order
# (by name), then input order, and every other is removed, as when all inputs were one dataset.
# Dedup per dataset would leave those copies twice in every batch that mixes the two. The shards
# are linked as OUT/dedup/in/DATASET@NAME.bin (loom-dedup names outputs after inputs, and names
# need differ only within a dataset), its outputs OUT/dedup/out/DATASET@NAME.bin as
# OUT/dedup/shards/DATASET/NAME.bin, which split reads; report and summary are in OUT/dedup/work.
# The stamp OUT/dedup/done depends on every token shard, the references' files, the eval files
# and OUT/dedup/args (the options and inputs, rewritten when they change), so a changed input,
# reference, eval file or flag reruns loom-dedup (which itself redoes only what changed) and then
# every split, pack and training; nothing changed, make does not call it. An input whose every
# document is removed has no output: its split writes nothing (old shards of it removed) and the
# packs take what exists. DEDUP off after a DEDUP=1 run in the same OUT: the splits are redone
# from the token shards (their stamps are removed as the Makefile is read).
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
DEDUP        ?=
DEDUP_REFERENCES ?=
DEDUP_EVAL   ?=
DEDUP_FLAGS  ?=

ifeq ($(strip $(STEPS)),)
$(error STEPS: $(CONFIG) has no data.total_steps; give STEPS=N)
endif
ifneq ($(filter-out 0 1,$(strip $(DEDUP))),)
$(error DEDUP: 1 (on) or 0 (off), not '$(DEDUP)')
endif
ifneq ($(strip $(DEDUP)),1)
ifneq ($(strip $(DEDUP_REFERENCES) $(DEDUP_EVAL) $(DEDUP_FLAGS)),)
$(warning DEDUP_REFERENCES, DEDUP_EVAL and DEDUP_FLAGS are used with DEDUP=1 only: no dedup step)
endif
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
define token_rules
$(OUT)/tokens/$(call id_of,$(1)).bin.meta: $(1) $(MODEL)
	$(BIN)/tokenize/loom-tokenize --model $(MODEL) --output-dir $(OUT)/tokens/$(call ds_of,$(1)) --threads $(THREADS) $(1)
endef
$(foreach f,$(INPUTS),$(eval $(call token_rules,$(f))))
ifneq ($(strip $(DEDUP)),1)
define input_rules
$(OUT)/split/$(call id_of,$(1)).split: $(OUT)/tokens/$(call id_of,$(1)).bin.meta
	$(BIN)/packer/loom-pack split --valid-fraction $(VALID_FRACTION) --min-valid-docs $(MIN_VALID_DOCS) --seed $(SEED) \
	  --output-dir $(OUT)/split/$(call ds_of,$(1)) $(OUT)/tokens/$(call id_of,$(1)).bin
	touch $$@
endef
# Splits of deduplicated shards (DEDUP=1 before, in this OUT) are redone from the token shards.
$(shell [ ! -e $(OUT)/dedup/done ] || rm -f $(OUT)/dedup/done $(OUT)/split/*/*.split)
else
# DEDUP=1: split reads the input's deduplicated shard; without one (every document removed) it
# removes the input's old split shards (.meta first: it marks a shard complete) and splits nothing.
define input_rules
$(OUT)/split/$(call id_of,$(1)).split: $(OUT)/dedup/done
	if [ -e $(OUT)/dedup/shards/$(call id_of,$(1)).bin.meta ]; then \
	  $(BIN)/packer/loom-pack split --valid-fraction $(VALID_FRACTION) --min-valid-docs $(MIN_VALID_DOCS) \
	  --seed $(SEED) --output-dir $(OUT)/split/$(call ds_of,$(1)) $(OUT)/dedup/shards/$(call id_of,$(1)).bin; \
	else for side in train valid; do rm -f $(OUT)/split/$(call ds_of,$(1))/$$$$side/$(call name_of,$(1)).bin.meta \
	  $(OUT)/split/$(call ds_of,$(1))/$$$$side/$(call name_of,$(1)).bin || exit 1; done; \
	  echo "$(1): every document removed by loom-dedup ($(OUT)/dedup/work/report.jsonl): nothing to split"; fi
	touch $$@
endef
# The inputs in loom-dedup's order (datasets by name, then INPUTS' order), as DATASET/NAME; its
# arguments but --threads (which does not change the output), recorded in OUT/dedup/args as the
# Makefile is read when they changed; the references' files (a folder's, or a shard's and its
# .meta/.idx) as prerequisites.
DEDUP_IDS  := $(strip $(foreach d,$(DATASETS),$(foreach f,$(INPUTS),\
                $(if $(filter $(d),$(call ds_of,$(f))),$(call id_of,$(f))))))
DEDUP_ARGS := $(strip $(foreach r,$(DEDUP_REFERENCES),--reference $(r)) $(foreach e,$(DEDUP_EVAL),--eval $(e)) \
              $(if $(strip $(DEDUP_EVAL)),--model $(MODEL)) $(DEDUP_FLAGS) \
              $(foreach i,$(DEDUP_IDS),$(OUT)/dedup/in/$(subst /,@,$(i)).bin))
DEDUP_REFERENCE_FILES := $(foreach r,$(DEDUP_REFERENCES),$(if $(wildcard $(r)/.),$(shell find $(r) -type f), \
                           $(wildcard $(r) $(r).meta $(r).bin $(r).bin.meta $(r).idx)))
$(shell mkdir -p $(OUT)/dedup)
ifneq ($(file <$(OUT)/dedup/args),$(DEDUP_ARGS))
$(file >$(OUT)/dedup/args,$(DEDUP_ARGS))
endif

.PHONY: dedup
dedup: $(OUT)/dedup/done
# Links in (relative, so OUT may move), loom-dedup, links out for the outputs that exist; outputs
# of inputs no longer given are removed. The stamp is touched last: a failed run is redone.
$(OUT)/dedup/done: $(TOKENS) $(DEDUP_REFERENCE_FILES) $(DEDUP_EVAL) $(OUT)/dedup/args
	rm -rf $(OUT)/dedup/in $(OUT)/dedup/shards && mkdir -p $(OUT)/dedup/in && for id in $(DEDUP_IDS); do \
	  f=$(OUT)/dedup/in/$${id%%/*}@$${id#*/}.bin && ln -s ../../tokens/$$id.bin $$f && \
	  ln -s ../../tokens/$$id.bin.meta $$f.meta || exit 1; done
	$(BIN)/dedup/loom-dedup --work-dir $(OUT)/dedup/work --output-dir $(OUT)/dedup/out --threads $(THREADS) $(DEDUP_ARGS)
	for f in $(OUT)/dedup/out/*; do [ -L $(OUT)/dedup/in/$${f##*/} ] || rm -f $$f || exit 1; done; \
	for id in $(DEDUP_IDS); do f=$${id%%/*}@$${id#*/}.bin; mkdir -p $(OUT)/dedup/shards/$${id%%/*} && \
	  if [ -e $(OUT)/dedup/out/$$f.meta ]; then ln -s ../../out/$$f $(OUT)/dedup/shards/$$id.bin && \
	  ln -s ../../out/$$f.meta $(OUT)/dedup/shards/$$id.bin.meta; fi || exit 1; done
	touch $@
endif
$(foreach f,$(INPUTS),$(eval $(call input_rules,$(f))))

# SEQ_LEN, WEIGHTS and MIXTURE as files that change only when their value does (written as the
# Makefile is read, so that `make -q` can answer): the packs depend on the first, training on all.
$(shell mkdir -p $(OUT) && [ "$$(cat $(OUT)/seq_len 2>/dev/null)" = "$(SEQ_LEN)" ] || echo $(SEQ_LEN) > $(OUT)/seq_len)
$(shell [ "$$(cat $(OUT)/mixture 2>/dev/null)" = "$(WEIGHTS) $(MIXTURE)" ] || echo "$(WEIGHTS) $(MIXTURE)" > $(OUT)/mixture)

# (with DEDUP=1, a dataset's documents may also all be removed)
dedup_why = $(if $(filter 1,$(strip $(DEDUP))), or was removed by loom-dedup ($(OUT)/dedup/work/report.jsonl))

# Each dataset packed apart, train and valid, from the sides its splits wrote. The valid stamp is
# touched after its packs are written, or after the old ones are removed when there is nothing to pack.
define dataset_rules
$(OUT)/packed/train/$(1)/packed.bin.meta: $(call split_of,$(1)) $(OUT)/seq_len
	ins=$$$$($$(call sides_sh,$(1),train)); [ -n "$$$$ins" ] || { echo "dataset $(1): no training document: every \
	  document of $(OUT)/split/$(1) went to validation$(dedup_why) (VALID_FRACTION=$(VALID_FRACTION), SEED=$(SEED)); \
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
