"""The model settings `promptFormat` and `weights`: parsed, checked, and a change of either reloads the model."""

import pytest

from dg_lsp.config import Settings, parse_settings


def test_prompt_format_and_weights_parse_and_need_a_reload():
    s, errors = parse_settings({"promptFormat": "chat", "weights": "int4"})
    assert errors == []
    assert (s.prompt_format, s.weights) == ("chat", "int4")
    assert s.engine_key() != Settings().engine_key()
    assert (Settings().prompt_format, Settings().weights) == ("auto", "auto")


@pytest.mark.parametrize(("key", "value"), [("promptFormat", "instruct"), ("weights", "int3"), ("weights", 4)])
def test_bad_model_settings_are_named_and_keep_their_defaults(key, value):
    s, errors = parse_settings({key: value})
    assert len(errors) == 1 and key in errors[0]
    assert s == Settings()


NEW_SETTINGS_GARBAGE = [("minConfidence", 2), ("minConfidence", "0.5"), ("minConfidence", True),
                        ("openaiDiffusion", "maybe"), ("rewriteFromSelection", "yes"), ("rewriteNoise", -0.1),
                        ("rewriteNoise", "half"), ("crossFileTokens", -1), ("crossFileTokens", 1.5),
                        ("indexMaxFiles", "all"), ("indexMaxFileBytes", None)]


@pytest.mark.parametrize(("key", "value"), NEW_SETTINGS_GARBAGE)
def test_garbage_in_this_sessions_settings_is_named_and_keeps_the_default(key, value):
    """minConfidence, openaiDiffusion, rewriteFromSelection/rewriteNoise, crossFileTokens and the index caps: a bad
    value is one error naming its key, and every setting keeps its default."""
    s, errors = parse_settings({key: value})
    assert len(errors) == 1 and key in errors[0], errors
    assert s == Settings()
