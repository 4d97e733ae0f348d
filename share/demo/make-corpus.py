#!/usr/bin/env python3
"""Write the demo corpus: short generated stories as JSON lines.

The text is made from a small grammar with a fixed seed, so every machine gets
the same bytes, the model has real structure to learn (agreement, recurring
characters, simple plots), and nothing needs downloading. Some names and words
carry accents, CJK or emoji so the tokenizer path sees non-ASCII text.

usage: make-corpus.py [--docs N] [--seed S] > corpus.jsonl
"""
import argparse
import json
import random
import sys

NAMES = ["Anna", "Ben", "Clara", "David", "Emma", "Felix", "Grace", "Hugo", "Iris", "Jonas",
         "Zoë", "José", "Amélie", "Søren", "Yuki", "Mei"]
ANIMALS = ["cat", "dog", "bird", "rabbit", "fox", "horse", "owl", "frog"]
COLORS = ["red", "blue", "green", "yellow", "small", "old", "happy", "sleepy"]
PLACES = ["the garden", "the forest", "the river", "the market", "the old house", "the hill",
          "the school", "the café"]
THINGS = ["a ball", "a book", "a kite", "an apple", "a red hat", "a map", "a little box", "a shell"]
FEELINGS = ["happy", "sad", "surprised", "tired", "brave", "curious"]
EXTRAS = ["", "", "", "", " 🙂", " (in Japanese: ねこ)", " They said “hello”.", " It cost 12 coins."]


def sentence_pool(r, hero, pet, color):
    place = r.choice(PLACES)
    thing = r.choice(THINGS)
    feel = r.choice(FEELINGS)
    friend = r.choice([n for n in NAMES if n != hero])
    return [
        f"One day {hero} went to {place} with the {color} {pet}.",
        f"In {place}, {hero} found {thing}.",
        f"The {pet} looked at {thing} and was {feel}.",
        f"{hero} met {friend}, who wanted {thing} too.",
        f"\"Can we share it?\" asked {friend}.",
        f"{hero} thought for a moment and said yes.",
        f"Together they played until the sun went down.",
        f"The {color} {pet} ran after them all the way home.",
        f"At night {hero} was {feel} and fell asleep.",
    ]


def story(r):
    hero = r.choice(NAMES)
    pet = r.choice(ANIMALS)
    color = r.choice(COLORS)
    pool = sentence_pool(r, hero, pet, color)
    n = r.randint(3, len(pool))
    body = " ".join(pool[:n]) + r.choice(EXTRAS)
    if r.random() < 0.3:
        body += "\n\n" + " ".join(sentence_pool(r, hero, pet, color)[: r.randint(2, 5)])
    return f"Once upon a time there was a {color} {pet} named {r.choice(NAMES)}. " + body


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    r = random.Random(a.seed)
    out = sys.stdout
    for i in range(a.docs):
        out.write(json.dumps({"id": i, "text": story(r)}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
