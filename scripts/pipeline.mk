# The pipeline as a Makefile: one tokenize job per input file (run with -j N), then verify, pack and
# train. Each step's outputs are complete or absent (loom writes atomically), so a killed `make`
# is simply rerun.
#
#   make -f scripts/pipeline.mk -j 8 INPUTS="data/a.jsonl.zst data/b.txt" MODEL=tok.model \
#        OUT=out CONFIG=configs/demo.ini SEQ_LEN=256
#
# Defaults run the demo's data through the demo model and config.
BIN     ?= build
MODEL   ?= data_samples/spm_2k.model
INPUTS  ?= data_samples/botchan_head.txt data_samples/botchan_tail.json data_samples/neko_head.jsonl.gz
OUT     ?= out/pipeline
CONFIG  ?= configs/demo.ini
SEQ_LEN ?= 256
SEED    ?= 1

# NAME.EXT[.gz|.zst] -> $(OUT)/tokens/NAME.bin.meta (the .meta is renamed last: it marks completion)
name_of = $(basename $(basename $(basename $(notdir $(1)))))
METAS   := $(foreach f,$(INPUTS),$(OUT)/tokens/$(call name_of,$(f)).bin.meta)

.PHONY: all tokens verify pack train
all: train
tokens: $(METAS)

define tokenize_rule
$(OUT)/tokens/$(call name_of,$(1)).bin.meta: $(1) $(MODEL)
	$(BIN)/tokenize/loom-tokenize --model $(MODEL) --output-dir $(OUT)/tokens --threads 1 $(1)
endef
$(foreach f,$(INPUTS),$(eval $(call tokenize_rule,$(f))))

$(OUT)/verified: $(METAS)
	$(BIN)/packer/loom-pack verify --deep $(OUT)/tokens
	touch $@

$(OUT)/packed/train/all/packed.bin.meta: $(OUT)/verified
	$(BIN)/packer/loom-pack pack --seq-len $(SEQ_LEN) --strategy bestfit --seed $(SEED) \
	  --output-dir $(OUT)/packed/train/all $(METAS:.meta=)

train: $(OUT)/packed/train/all/packed.bin.meta
	$(BIN)/trainer/loom-train --config $(CONFIG) --data.train_folder=$(OUT)/packed/train \
	  --data.valid_folder "" --job.run_dir=$(OUT)/run
