# Bash completion for mha. Installed as share/bash-completion/completions/mha
# (loaded on demand by bash-completion); or: source scripts/mha-completion.bash
#
# Commands come from `mha help`, a command's options from `mha COMMAND
# --help`, so the completion follows the program it completes.
_mha() {
    local cur prev cmd words
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        words=$("${COMP_WORDS[0]}" help 2>/dev/null | sed -n 's/^  \([a-z]\+\)  .*/\1/p')
        COMPREPLY=($(compgen -W "$words --help --version" -- "$cur"))
        return
    fi
    cmd=${COMP_WORDS[1]}
    case $prev in
        -i|--input|-o|--output|--svg) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --out) COMPREPLY=($(compgen -d -- "$cur")); return ;;
        --dtype) COMPREPLY=($(compgen -W "f32 bf16 f16" -- "$cur")); return ;;
    esac
    if [ "$cmd" = help ]; then
        words=$("${COMP_WORDS[0]}" help 2>/dev/null | sed -n 's/^  \([a-z]\+\)  .*/\1/p')
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
        return
    fi
    if [[ $cur == -* ]] && [ "$cmd" = train ] && [ "${COMP_WORDS[2]}" = GPTModel ]; then
        words=$("${COMP_WORDS[0]}" train GPTModel --help 2>/dev/null | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
        COMPREPLY=($(compgen -W "$words --help" -- "$cur"))
    elif [[ $cur == -* ]]; then
        words=$("${COMP_WORDS[0]}" "$cmd" --help 2>/dev/null | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
        COMPREPLY=($(compgen -W "$words --help" -- "$cur"))
    elif [ "$cmd" = init ] && [ "$COMP_CWORD" -eq 2 ]; then
        COMPREPLY=($(compgen -W "SelfAttention_v1 SelfAttention_v2 CausalAttention MultiHeadAttentionWrapper MultiHeadAttention" -- "$cur"))
    elif [ "$cmd" = train ] && [ "$COMP_CWORD" -eq 2 ]; then
        COMPREPLY=($(compgen -W "GPTModel" -- "$cur"))
    elif [ "$cmd" = bench ] && [ "$COMP_CWORD" -eq 2 ]; then
        COMPREPLY=($(compgen -W "SelfAttention_v1 SelfAttention_v2 CausalAttention MultiHeadAttentionWrapper MultiHeadAttention" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -F _mha mha
