// Every GGUF metadata key walsh reads or writes, spelled once (as llama.cpp's LLM_KV table): the
// loader, the contract check, the tokenizer, walsh-inspect and walsh-mkmodel all name keys from
// here, so a file walsh writes is read back by the same names.
#ifndef WALSH_WORKER_MODEL_GGUF_KEYS_H_
#define WALSH_WORKER_MODEL_GGUF_KEYS_H_

namespace walsh::gguf_keys {

// The file (docs/format.md §1).
inline constexpr char kGeneralAlignment[] = "general.alignment";
inline constexpr char kGeneralArchitecture[] = "general.architecture";
inline constexpr char kGeneralFileType[] = "general.file_type";
inline constexpr char kGeneralName[] = "general.name";
inline constexpr char kGeneralWalshDenseReference[] = "general.walsh.dense_reference";
inline constexpr char kGeneralWalshSyntheticSeed[] = "general.walsh.synthetic_seed";

// The qwen35 architecture's hyperparameters (docs/format.md §5).
inline constexpr char kQwen35Prefix[] = "qwen35.";
inline constexpr char kQwen35AttentionHeadCount[] = "qwen35.attention.head_count";
inline constexpr char kQwen35AttentionHeadCountKv[] = "qwen35.attention.head_count_kv";
inline constexpr char kQwen35AttentionKeyLength[] = "qwen35.attention.key_length";
inline constexpr char kQwen35AttentionLayerNormRmsEpsilon[] =
    "qwen35.attention.layer_norm_rms_epsilon";
inline constexpr char kQwen35AttentionValueLength[] = "qwen35.attention.value_length";
inline constexpr char kQwen35BlockCount[] = "qwen35.block_count";
inline constexpr char kQwen35ContextLength[] = "qwen35.context_length";
inline constexpr char kQwen35EmbeddingLength[] = "qwen35.embedding_length";
inline constexpr char kQwen35FeedForwardLength[] = "qwen35.feed_forward_length";
inline constexpr char kQwen35FullAttentionInterval[] = "qwen35.full_attention_interval";
inline constexpr char kQwen35RopeDimensionCount[] = "qwen35.rope.dimension_count";
inline constexpr char kQwen35RopeDimensionSections[] = "qwen35.rope.dimension_sections";
inline constexpr char kQwen35RopeFreqBase[] = "qwen35.rope.freq_base";
inline constexpr char kQwen35SsmConvKernel[] = "qwen35.ssm.conv_kernel";
inline constexpr char kQwen35SsmGroupCount[] = "qwen35.ssm.group_count";
inline constexpr char kQwen35SsmInnerSize[] = "qwen35.ssm.inner_size";
inline constexpr char kQwen35SsmStateSize[] = "qwen35.ssm.state_size";
inline constexpr char kQwen35SsmTimeStepRank[] = "qwen35.ssm.time_step_rank";

// The Prism activation-transform contract (docs/format.md §6).
inline constexpr char kPrismHadamardPrefix[] = "prism.hadamard.";
inline constexpr char kPrismHadamardAxis[] = "prism.hadamard.axis";
inline constexpr char kPrismHadamardBlockSize[] = "prism.hadamard.block_size";
inline constexpr char kPrismHadamardGdnVGrouped[] = "prism.hadamard.gdn_v_grouped";
inline constexpr char kPrismHadamardInverseWeightNames[] = "prism.hadamard.inverse_weight_names";
inline constexpr char kPrismHadamardSignMode[] = "prism.hadamard.sign_mode";
inline constexpr char kPrismHadamardSignValues[] = "prism.hadamard.sign_values";
inline constexpr char kPrismHadamardSignWidths[] = "prism.hadamard.sign_widths";
inline constexpr char kPrismHadamardTiedOutput[] = "prism.hadamard.tied_output";
inline constexpr char kPrismHadamardTransform[] = "prism.hadamard.transform";
inline constexpr char kPrismHadamardVersion[] = "prism.hadamard.version";
inline constexpr char kPrismHadamardWeightNames[] = "prism.hadamard.weight_names";

// The tokenizer (docs/format.md §9).
inline constexpr char kTokenizerPrefix[] = "tokenizer.";
inline constexpr char kTokenizerChatTemplate[] = "tokenizer.chat_template";
inline constexpr char kTokenizerGgmlAddBosToken[] = "tokenizer.ggml.add_bos_token";
inline constexpr char kTokenizerGgmlBosTokenId[] = "tokenizer.ggml.bos_token_id";
inline constexpr char kTokenizerGgmlEosTokenId[] = "tokenizer.ggml.eos_token_id";
inline constexpr char kTokenizerGgmlMerges[] = "tokenizer.ggml.merges";
inline constexpr char kTokenizerGgmlModel[] = "tokenizer.ggml.model";
inline constexpr char kTokenizerGgmlPaddingTokenId[] = "tokenizer.ggml.padding_token_id";
inline constexpr char kTokenizerGgmlPre[] = "tokenizer.ggml.pre";
inline constexpr char kTokenizerGgmlTokenType[] = "tokenizer.ggml.token_type";
inline constexpr char kTokenizerGgmlTokens[] = "tokenizer.ggml.tokens";

// The vision projector beside a model, an mmproj file (docs/vision.md §1).
inline constexpr char kClipPrefix[] = "clip.";
inline constexpr char kClipHasAudioEncoder[] = "clip.has_audio_encoder";
inline constexpr char kClipHasTextEncoder[] = "clip.has_text_encoder";
inline constexpr char kClipHasVisionEncoder[] = "clip.has_vision_encoder";
inline constexpr char kClipProjectorType[] = "clip.projector_type";
inline constexpr char kClipUseGelu[] = "clip.use_gelu";
inline constexpr char kClipUseSilu[] = "clip.use_silu";
inline constexpr char kClipVisionAttentionHeadCount[] = "clip.vision.attention.head_count";
inline constexpr char kClipVisionAttentionLayerNormEpsilon[] =
    "clip.vision.attention.layer_norm_epsilon";
inline constexpr char kClipVisionBlockCount[] = "clip.vision.block_count";
inline constexpr char kClipVisionEmbeddingLength[] = "clip.vision.embedding_length";
inline constexpr char kClipVisionFeedForwardLength[] = "clip.vision.feed_forward_length";
inline constexpr char kClipVisionImageMean[] = "clip.vision.image_mean";
inline constexpr char kClipVisionImageSize[] = "clip.vision.image_size";
inline constexpr char kClipVisionImageStd[] = "clip.vision.image_std";
inline constexpr char kClipVisionIsDeepstackLayers[] = "clip.vision.is_deepstack_layers";
inline constexpr char kClipVisionNWaPattern[] = "clip.vision.n_wa_pattern";
inline constexpr char kClipVisionPatchSize[] = "clip.vision.patch_size";
inline constexpr char kClipVisionProjectionDim[] = "clip.vision.projection_dim";
inline constexpr char kClipVisionProjectorType[] = "clip.vision.projector_type";
inline constexpr char kClipVisionSpatialMergeSize[] = "clip.vision.spatial_merge_size";

}  // namespace walsh::gguf_keys

#endif  // WALSH_WORKER_MODEL_GGUF_KEYS_H_
