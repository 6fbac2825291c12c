"""The words the turtle gym's symbolic judge knows: stop words, negation cues, a light stemmer,
irregular forms, synonym groups and antonym pairs, and ``concepts(word)`` that maps a word to the
set of concepts it stands for.

A *concept* is a canonical stem ("mother" for mom/mum/mother/mothers, "die" for dead/died/death).
Two texts talk about the same thing when they share concepts; a question says the opposite of a
statement when one of its concepts is an antonym of one of the statement's concepts ("day" against
"night"). The groups were written for the vocabulary of the UserRL turtle stories (families,
killing and death, bodies, the senses, times of day, places); a word outside every group is its
own concept (its stem).
"""

from __future__ import annotations

import re
from functools import lru_cache

# Function words, auxiliaries, pronouns and question framing carry no story content. Words that
# only frame a question ("is it true that", "something", "happen") are here too, so that
# "Did something happen to the wife?" is about the wife.
STOP_WORDS = frozenset(
    """
    a an the this that these those there here it its of to in on at by for with from into onto
    upon about as than then so such and or but if because since while when whenever where wherever
    what which who whom whose why how whether is was were be been being am are do does did doing done
    have has had having will would could should can may might must shall ought i me my mine we
    us our ours you your yours he him his she her hers
    they them their theirs one ones someone somebody something anyone anybody anything
    everyone everybody everything thing things some any all each every both either other another
    same very really actually just also too quite rather even still already only again ever indeed
    true truly case fact happen happened happens happening involve involved involves related relate
    story puzzle answer question yes okay ok please tell know guess think believe say said ask
    get got getting make made go went gone going way like well much many more most less least
    up down out over off after before during until till through via per just lot lots kind sort
    time times else commit committed s t d ll m re ve
    """.split()
)

# Words that reverse what follows them in a clause. ``n't`` is split off by the tokenizer.
NEGATION_CUES = frozenset(
    "not no never n't nobody nothing none neither nor without cannot unable refuse refused refuses refusing "
    "deny denied denies denying".split()
)

# Past tenses, participles and plurals a suffix stemmer cannot undo; values are base forms.
IRREGULAR = {
    "saw": "see",
    "seen": "see",
    "went": "go",
    "took": "take",
    "taken": "take",
    "found": "find",
    "fell": "fall",
    "fallen": "fall",
    "ate": "eat",
    "eaten": "eat",
    "ran": "run",
    "thought": "think",
    "told": "tell",
    "knew": "know",
    "known": "know",
    "felt": "feel",
    "came": "come",
    "gave": "give",
    "given": "give",
    "heard": "hear",
    "brought": "bring",
    "bought": "buy",
    "caught": "catch",
    "hid": "hide",
    "hidden": "hide",
    "held": "hold",
    "kept": "keep",
    "lost": "lose",
    "met": "meet",
    "paid": "pay",
    "sold": "sell",
    "sent": "send",
    "slept": "sleep",
    "spoke": "speak",
    "spoken": "speak",
    "stole": "steal",
    "stolen": "steal",
    "stood": "stand",
    "threw": "throw",
    "thrown": "throw",
    "woke": "wake",
    "woken": "wake",
    "wore": "wear",
    "worn": "wear",
    "wrote": "write",
    "written": "write",
    "drank": "drink",
    "drunk": "drink",
    "drove": "drive",
    "driven": "drive",
    "broke": "break",
    "broken": "break",
    "began": "begin",
    "begun": "begin",
    "became": "become",
    "chose": "choose",
    "chosen": "choose",
    "forgot": "forget",
    "forgotten": "forget",
    "grew": "grow",
    "grown": "grow",
    "hung": "hang",
    "shot": "shoot",
    "lay": "lie",
    "led": "lead",
    "dug": "dig",
    "fed": "feed",
    "fought": "fight",
    "flew": "fly",
    "flown": "fly",
    "froze": "freeze",
    "frozen": "freeze",
    "swam": "swim",
    "sat": "sit",
    "bit": "bite",
    "bitten": "bite",
    "blew": "blow",
    "born": "birth",
    "children": "child",
    "men": "man",
    "women": "woman",
    "people": "person",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
    "wives": "wife",
    "knives": "knife",
    "lives": "life",
    "leaves": "leaf",
    "died": "die",
    "dies": "die",
    "lied": "lie",
    "lies": "lie",
    "dying": "die",
    "lying": "lie",
    "tied": "tie",
    "buried": "bury",
    "married": "marry",
    "carried": "carry",
    "worried": "worry",
    "cried": "cry",
    "tried": "try",
}

# Synonym groups: every word of a group stands for the group's first word. A word may also stand
# for a broader concept (``ALSO``): a corpse is a body and is dead.
SYNONYMS = [
    "mother mom mum mommy mama mummy",
    "father dad daddy papa",
    "kill murder slay killer murderer homicide assassinate slaughter",
    "die dead death deceased perish",
    "body corpse cadaver remains",
    "child kid",
    "person human individual",
    "woman lady",
    "man guy gentleman",
    "police cop officer policeman policemen",
    "house home apartment flat",
    "car vehicle automobile",
    "doctor physician",
    "afraid scared frightened terrified fear horrified fearful horror dread panic",
    "sad unhappy sorrow grief",
    "happy glad joyful joy",
    "eat consume devour",
    "see notice spot witness observe sight watch peer peek spy",
    "find discover",
    "realize realise",
    "phone telephone cellphone",
    "sleep asleep nap",
    "wake awake",
    "poison poisonous toxic",
    "accident accidental accidentally unintentional unintentionally mistakenly",
    "deliberate deliberately intentional intentionally purposely",
    "suicide",
    "alive survive survived survivor",
    "dark darkness",
    "light bright lit",
    "big large huge enormous",
    "small little tiny",
    "rich wealthy",
    "poor",
    "real genuine",
    "fake counterfeit",
    "inside indoors",
    "outside outdoors",
    "close shut",
    "hate despise",
    "love adore",
    "remember recall",
    "forget",
    "day daytime daylight",
    "night nighttime midnight",
    "old elderly aged",
    "young youthful",
    "boyfriend lover",
    "ghost spirit",
    "starve hunger hungry famine",
    "only sole single",
    "lie liar untrue false",
    "save rescue",
    "guilt guilty remorse",
    "mistake misunderstand misunderstanding misinterpret confuse confused",
    "stomach belly abdomen",
    "pain ache hurt torture",
    "prison prisoner imprison captive",
    "new recent fresh",
    "collapse faint",
    "weight weigh heavy",
    "thirst thirsty",
    "neighbor neighbour",
    "magnet magnetic",
    "loud noisy noise",
    "quiet silent",
    "drown",
    "sleepwalk sleepwalker sleepwalking",
    "blood bloody bleed",
    "hospital clinic",
    "bury burial grave",
    "cut chop slice dismember sever piece",
    "hit beat strike punch",
    "steal rob robber robbery theft thief burglar",
    "jump leap",
    "scream shout yell",
    "cry weep sob",
    "window windowpane",
    "sick ill illness disease",
    "crazy insane madness mental",
    "twin twins",
    "stranger",
    "strangle choke",
    "wrong incorrect",
    "right correct",
    "same identical",
    "different",
    "male",
    "female",
    "boy",
    "girl",
    "husband",
    "wife",
    "son",
    "daughter",
    "baby infant",
    "open",
    "hot",
    "cold",
    "win",
    "lose",
    "innocent",
    "blind",
    "self myself yourself yourselves himself herself themselves ourselves itself",  # "shot himself"
]

# Broader concepts a word also stands for (after its synonym group).
ALSO = {
    "body": ("die",),  # a corpse, remains: somebody is dead
    "suicide": ("die", "kill"),
    "son": ("child", "man"),
    "daughter": ("child", "woman"),
    "baby": ("child",),
    "boy": ("child", "man"),
    "girl": ("child", "woman"),
    "husband": ("spouse", "man"),
    "wife": ("spouse", "woman"),
    "father": ("man",),
    "mother": ("woman",),
    "strangle": ("kill", "die"),
    "murder": ("die",),
    "kill": ("die",),
    "thief": ("steal",),
    "ghost": ("die",),
    "starve": ("die",),
    "drown": ("die",),
}

# Antonym pairs of concepts (group heads): a question using one against a statement using the other
# gets the opposite answer.
ANTONYMS = [
    ("alive", "die"),
    ("day", "night"),
    ("light", "dark"),
    ("man", "woman"),
    ("male", "female"),
    ("boy", "girl"),
    ("old", "young"),
    ("old", "new"),
    ("big", "small"),
    ("rich", "poor"),
    ("real", "fake"),
    ("same", "different"),
    ("inside", "outside"),
    ("open", "close"),
    ("love", "hate"),
    ("remember", "forget"),
    ("hot", "cold"),
    ("win", "lose"),
    ("guilt", "innocent"),
    ("accident", "deliberate"),
    ("happy", "sad"),
    ("right", "wrong"),
    ("sleep", "wake"),
    ("loud", "quiet"),
]

PREFIX_CHARS = 6
_WORD_RE = re.compile(r"[a-z]+(?:'[a-z]+)*")


# Phrases that stand for one word ("passed away" is "died"); replaced before words are split.
PHRASES = {
    r"\bpass(ed|es)? away\b": "died",
    r"\btook (his|her|their) own life\b": "suicide",
    r"\btake (his|her|their) own life\b": "suicide",
    r"\bkill(ed|s)? (himself|herself|themselves|myself)\b": "suicide",
    r"\bend (his|her|their) life\b": "suicide",
    r"\bpower went out\b": "power outage",
}
_PHRASE_RES = [(re.compile(p), w) for p, w in PHRASES.items()]


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` with contractions split: "didn't" -> "did", "n't"; "it's" -> "it".

    >>> words("He didn't see the man's shadow.")
    ['he', 'did', "n't", 'see', 'the', 'man', 'shadow']
    """
    out: list[str] = []
    low = text.lower().replace("\u2019", "'")
    for pattern, word in _PHRASE_RES:
        low = pattern.sub(word, low)
    for w in _WORD_RE.findall(low):
        if w.endswith("n't"):
            head = w[:-3]
            out += [{"ca": "can", "wo": "will", "sha": "shall"}.get(head, head), "n't"]
        elif "'" in w:
            out.append(w.split("'", 1)[0])
        else:
            out.append(w)
    return [w for w in out if w]


def stem(word: str) -> str:
    """A light suffix stemmer: irregular forms first, then -ies/-ied, -ing, -ed, -s, -ly; a final
    "e" is dropped so that "make" and "making" meet, and a doubled final consonant is undone after
    -ing/-ed ("stopped" -> "stop").

    >>> [stem(w) for w in ("killed", "making", "make", "stopped", "bodies", "houses", "went")]
    ['kill', 'mak', 'mak', 'stop', 'body', 'hous', 'go']
    """
    w = IRREGULAR.get(word, word)
    if w != word:
        return _drop_e(w)
    for suffix, repl in (("ies", "y"), ("ied", "y")):
        if w.endswith(suffix) and len(w) > 4:
            return w[: -len(suffix)] + repl
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            base = w[: -len(suffix)]
            if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]
            return _drop_e(base)
    if w.endswith("ly") and len(w) > 5:
        return _drop_e(w[:-2])
    if w.endswith("s") and len(w) > 3 and not w.endswith(("ss", "us", "is")):
        return _drop_e(w[:-1])
    return _drop_e(w)


def _drop_e(w: str) -> str:
    return w[:-1] if len(w) > 3 and w.endswith("e") else w


@lru_cache(maxsize=1)
def _tables() -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """(stem -> group head, concept -> its antonym concepts)."""
    head: dict[str, str] = {}
    for group in SYNONYMS:
        members = group.split()
        for m in members:
            head.setdefault(stem(m), members[0])
            head.setdefault(m, members[0])
    anti: dict[str, set[str]] = {}
    for a, b in ANTONYMS:
        anti.setdefault(a, set()).add(b)
        anti.setdefault(b, set()).add(a)
    return head, {k: frozenset(v) for k, v in anti.items()}


# In a story, a gendered pronoun names a man or a woman ("he strangled her" is about a man and a
# woman); in a question pronouns stay stop words (they name nobody the story can be checked for).
STORY_PRONOUNS = {
    **dict.fromkeys(("he", "him", "his"), "man"),
    **dict.fromkeys(("she", "her", "hers"), "woman"),
}


def story_concepts(word: str) -> frozenset[str]:
    """What a word of the story states: :func:`concepts`, and a man or a woman for a pronoun."""
    pronoun = STORY_PRONOUNS.get(word)
    return frozenset([pronoun]) if pronoun else concepts(word)


@lru_cache(maxsize=65536)
def head_concept(word: str) -> str | None:
    """The one concept a word names (its group head or stem), None for stop words. A question
    asks about this; what a statement entails as well (``ALSO``) is in :func:`concepts`."""
    if word in STOP_WORDS or word in NEGATION_CUES or len(word) < 2:
        return None
    head, _ = _tables()
    return head.get(word) or head.get(stem(word)) or truncate(stem(word))


@lru_cache(maxsize=65536)
def concepts(word: str) -> frozenset[str]:
    """The concepts a (lower-case) word stands for; empty for stop words and negation cues.

    >>> sorted(concepts("corpse")), sorted(concepts("mom")), sorted(concepts("the"))
    (['body', 'die'], ['mother', 'woman'], [])
    """
    base = head_concept(word)
    return frozenset((base, *ALSO.get(base, ()))) if base else frozenset()


def truncate(s: str) -> str:
    """A stem cut to ``PREFIX_CHARS`` characters, so that derived forms the stemmer leaves apart meet
    ("violent"/"violence", "realize"/"realization", "protect"/"protection"). Words of a synonym
    group are looked up before this, which keeps apart the few words it would join wrongly.

    >>> truncate("violenc"), truncate("violent"), truncate("night")
    ('violen', 'violen', 'night')
    """
    return s[:PREFIX_CHARS] if len(s) > PREFIX_CHARS else s


def antonyms(concept: str) -> frozenset[str]:
    """Concepts opposite to ``concept`` (empty when it has none)."""
    return _tables()[1].get(concept, frozenset())
