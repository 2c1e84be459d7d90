# bash completion for mha (placeholder)
