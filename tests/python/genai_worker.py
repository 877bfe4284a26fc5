"""One greedy generation with onnxruntime-genai, in a process of its own (``test_genai.py``
runs it): genai loads ONNX Runtime's shared library, a second ORT beside the one the test
process imported, so the EP is registered with genai's ORT here and nowhere else.

``python genai_worker.py MODEL_DIR --provider cpu|mlx [--library PATH] [--option KEY=VALUE]...
[--profile PREFIX] --prompts JSON`` generates for the batch of prompts ``JSON`` (a list of
equally long lists of token ids, left-padded with the config's ``pad_token_id``) and prints one
JSON line: ``tokens`` (each row's whole sequence, prompt included) and ``profile`` (the ORT
profile genai's decoder session wrote, when ``--profile`` asked for one).
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import sys

EP_NAME = "MLXExecutionProvider"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir")
    parser.add_argument("--provider", choices=["cpu", "mlx"], required=True)
    parser.add_argument("--library", help="the EP library (with --provider mlx)")
    parser.add_argument("--option", action="append", default=[], help="an EP option KEY=VALUE")
    parser.add_argument("--profile", help="profile the decoder session into PREFIX_<time>.json")
    parser.add_argument("--prompts", type=json.loads, required=True)
    args = parser.parse_args(argv)

    import numpy as np
    import onnxruntime_genai as og

    config = og.Config(args.model_dir)
    if args.profile:
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {"enable_profiling": args.profile}}}}))
    config.clear_providers()
    if args.provider == "mlx":
        if not args.library:
            parser.error("--provider mlx needs --library")
        og.register_execution_provider_library(EP_NAME, args.library)
        config.append_provider(EP_NAME)
        for option in args.option:
            key, _, value = option.partition("=")
            config.set_provider_option(EP_NAME, key, value)

    model = og.Model(config)
    params = og.GeneratorParams(model)
    prompts = np.array(args.prompts, np.int32)
    params.set_search_options(batch_size=prompts.shape[0])
    generator = og.Generator(model, params)
    generator.append_tokens(prompts)
    while not generator.is_done():
        generator.generate_next_token()
    tokens = [[int(t) for t in generator.get_sequence(row)] for row in range(prompts.shape[0])]
    # The profile is written when the decoder session is released.
    del generator, params, model
    gc.collect()
    profile = None
    if args.profile:
        found = sorted(glob.glob(args.profile + "*.json"))
        profile = found[-1] if found else None
    print(json.dumps({"tokens": tokens, "profile": profile}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
