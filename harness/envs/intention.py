"""``intention``: clarify a vague request by asking about its hidden missing details.

A task is one of 33 vague requests ("Help me plan a birthday party.") with 3-6 hidden details drawn
from the request's detail pool, each with a seeded value and an importance: 1 (essential), 2 or 3
(nice to know). Details are facts of kind ``detail``.

Reward (``on_ask``): a detail is *covered* the first time a user reply to a question discloses it
(volunteered disclosures do not cover: the skill is asking). Each newly covered detail earns
``IMPORTANCE_VALUE`` (1.0 / 0.7 / 0.4 for importance 1 / 2 / 3). When one question newly covers n > 1
details, each earns its value divided by n: one broad question that sweeps up several details earns
what their average would, so asking one focused question per detail pays more. The episode score is
the sum of these rewards and can exceed 1.

``answer`` is the agent's final summary; it ends the episode (task reward 0: the reward was earned
by asking). Success: the covered share of the importance-weighted total (weights as above) is at
least ``success_threshold``. An episode that ends without an answer is not a success.

The task has no single hidden answer, so ``task.secret`` is empty (the leak guard has nothing to
protect; disclosure limits come from the user knobs).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any

from harness.envs.base import UserCentricEnv, split_of, task_seed
from harness.envs.registry import register
from harness.plugins.points import override_point
from harness.types import AnswerResult, Fact, ReplyCheck, Task, UserReply
from harness.users.fidelity import Claim, check_claims

GYM = "intention"
# Words of a detail's sentence that say nothing of which detail it is ("I would like ...").
_FRAME_WORDS = frozenset(
    "would like want need have should will with that this from about they them their there".split()
)
IMPORTANCE_VALUE = {1: 1.0, 2: 0.7, 3: 0.4}
MIN_DETAILS, MAX_DETAILS = 3, 6


@dataclass(frozen=True)
class Detail:
    """A detail a request may leave out: ``text`` with ``{v}`` filled by one of ``values``."""

    name: str
    importance: int
    text: str
    values: tuple[str, ...]
    keywords: tuple[str, ...]


@dataclass(frozen=True)
class Request:
    """A vague request and the pool of details it may hide."""

    name: str
    prompt: str
    details: tuple[Detail, ...]


def _d(name: str, importance: int, text: str, values: str, keywords: str) -> Detail:
    return Detail(name, importance, text, tuple(v.strip() for v in values.split("|")), tuple(keywords.split()))


# Shared details: the same kind of missing information recurs across requests.
def _budget(importance: int = 1, values: str = "$300|$800|$2,000") -> Detail:
    return _d("budget", importance, "My budget is {v}.", values, "budget cost money spend")


def _date(what: str, importance: int = 2, values: str = "Saturday, May 10|Sunday, June 22|Friday, March 7") -> Detail:
    return _d("date", importance, f"The {what} is on {{v}}.", values, "date day when")


def _deadline(importance: int = 3, values: str = "Friday|next Tuesday|the end of the month") -> Detail:
    return _d("deadline", importance, "I need it by {v}.", values, "deadline due when need")


def _people(what: str, importance: int = 1, values: str = "two|four|six") -> Detail:
    return _d("people", importance, f"{what} {{v}} people.", values, "people number many guests")


REQUESTS: tuple[Request, ...] = (
    Request(
        "birthday_party",
        "Help me plan a birthday party.",
        (
            _d(
                "celebrant",
                1,
                "It's for my {v}.",
                "son turning 7|daughter turning 12|mother turning 60|best friend turning 30",
                "who age birthday turning",
            ),
            _people("About", 1, "12|25|40"),
            _budget(1, "$200|$500|$1,200"),
            _date("party"),
            _d("venue", 2, "I'd like it {v}.", "at home|in a park|at a bowling alley", "venue place location where"),
            _d("theme", 3, "The theme should be {v}.", "dinosaurs|outer space|a 1980s disco", "theme decoration style"),
            _d(
                "food",
                2,
                "{v}",
                "Two guests are vegetarian.|One child has a peanut allergy.|We want pizza and cake.",
                "food diet allergy menu",
            ),
        ),
    ),
    Request(
        "wedding_speech",
        "Write a speech for my friend's wedding.",
        (
            _d(
                "role",
                1,
                "I'm {v}.",
                "the best man|the bride's sister|the groom's college roommate",
                "role relationship who",
            ),
            _d(
                "length",
                1,
                "It should last about {v}.",
                "two minutes|five minutes|eight minutes",
                "length long minutes",
            ),
            _d("tone", 1, "The tone should be {v}.", "funny|heartfelt|formal", "tone mood style"),
            _d("names", 2, "The couple are {v}.", "Anna and Ben|Maya and Leo|Sam and Priya", "names couple called"),
            _d(
                "story",
                2,
                "I'd like to mention {v}.",
                "how they met on a hiking trip|their dog Biscuit|our road trip in college",
                "story anecdote memory mention",
            ),
            _d("language", 3, "The speech should be in {v}.", "English|English and Spanish|French", "language speak"),
        ),
    ),
    Request(
        "workout_plan",
        "Make me a workout plan.",
        (
            _d("goal", 1, "My goal is to {v}.", "lose weight|build muscle|run a half marathon", "goal aim purpose"),
            _d("days", 1, "I can train {v} days a week.", "three|four|five", "days week often frequency"),
            _d(
                "level",
                1,
                "I'm {v}.",
                "a complete beginner|fairly fit|an experienced athlete",
                "level experience fitness",
            ),
            _d(
                "equipment",
                2,
                "I have {v}.",
                "no equipment|dumbbells at home|a full gym membership",
                "equipment gym weights",
            ),
            _d(
                "injury",
                2,
                "{v}",
                "I have a bad knee.|My lower back gets sore.|I have no injuries.",
                "injury injuries pain limitations",
            ),
            _d("session", 3, "Each session can be {v}.", "30 minutes|45 minutes|an hour", "session minutes length"),
        ),
    ),
    Request(
        "laptop",
        "Help me choose a new laptop.",
        (
            _budget(1, "$600|$1,000|$2,000"),
            _d(
                "use",
                1,
                "I'll mainly use it for {v}.",
                "programming|video editing|gaming|writing and browsing",
                "use purpose tasks mainly",
            ),
            _d("os", 2, "I prefer {v}.", "Windows|macOS|Linux", "operating system windows mac"),
            _d("screen", 2, "The screen should be {v}.", "13 inches|15 inches|17 inches", "screen size inches display"),
            _d("battery", 3, "I need {v} of battery life.", "8 hours|12 hours|15 hours", "battery life hours"),
            _d(
                "weight",
                3,
                "It should weigh {v}.",
                "under 1.5 kg|under 2 kg|whatever, it stays on my desk",
                "weight heavy light portable",
            ),
        ),
    ),
    Request(
        "dinner_recipe",
        "Suggest a recipe for dinner tonight.",
        (
            _people("I'm cooking for", 1),
            _d(
                "diet",
                1,
                "{v}",
                "We're vegetarian.|One of us is gluten-free.|We eat everything.",
                "diet dietary allergies restrictions",
            ),
            _d("time", 1, "I have {v} to cook.", "30 minutes|an hour|two hours", "time minutes long"),
            _d("cuisine", 2, "We feel like {v} food.", "Italian|Thai|Mexican", "cuisine kind style"),
            _d(
                "ingredient",
                2,
                "I'd like to use up {v}.",
                "some chicken thighs|a bag of spinach|leftover rice",
                "ingredients fridge leftovers",
            ),
            _d("skill", 3, "My cooking skills are {v}.", "basic|decent|advanced", "skill level experience cooking"),
        ),
    ),
    Request(
        "vacation",
        "Plan a vacation for me.",
        (
            _d(
                "travellers",
                1,
                "{v}.",
                "My partner and I are going|A family of four is going|It's just me going",
                "who travellers travelling people",
            ),
            _budget(1, "$1,500|$4,000|$9,000"),
            _d(
                "dates",
                1,
                "We can go {v}.",
                "in mid-July for a week|over Christmas for ten days|for a long weekend in May",
                "dates when long",
            ),
            _d(
                "kind", 2, "We want {v}.", "a beach holiday|a city break|a hiking trip", "kind type destination holiday"
            ),
            _d("origin", 2, "We'll leave from {v}.", "Chicago|London|Sydney", "leave depart from home"),
            _d("pace", 3, "We like a {v} pace.", "relaxed|packed", "pace relaxed busy schedule"),
        ),
    ),
    Request(
        "resume",
        "Help me improve my resume.",
        (
            _d(
                "role",
                1,
                "I'm applying for {v} roles.",
                "data analyst|product manager|nursing",
                "job role position applying",
            ),
            _d("experience", 1, "I have {v} of experience.", "2 years|7 years|15 years", "experience years career"),
            _d("pages", 2, "It should fit on {v}.", "one page|two pages", "length pages long"),
            _d(
                "gap",
                2,
                "{v}",
                "I have a one-year gap for caring for a parent.|I changed careers last year.|I have no gaps.",
                "gap break employment history",
            ),
            _d("format", 3, "I need it as {v}.", "a PDF|a Word document", "format file pdf"),
            _d("country", 3, "The jobs are in {v}.", "Germany|the US|Canada", "country location where"),
        ),
    ),
    Request(
        "vegetable_garden",
        "Help me start a vegetable garden.",
        (
            _d(
                "space",
                1,
                "I have {v}.",
                "a small balcony|a 3 by 4 meter backyard plot|two raised beds",
                "space size area room",
            ),
            _d(
                "climate",
                1,
                "I live in {v}.",
                "a cold northern climate|a hot dry climate|a mild rainy climate",
                "climate weather region",
            ),
            _d(
                "crops",
                1,
                "I'd like to grow {v}.",
                "tomatoes and herbs|salad greens|potatoes and beans",
                "grow crops vegetables plants",
            ),
            _d("sun", 2, "The spot gets {v}.", "full sun|half a day of sun|mostly shade", "sun sunlight shade light"),
            _d("time", 2, "I can spend {v} on it.", "an hour a week|a few hours a week", "time hours spend"),
            _d(
                "pests",
                3,
                "{v}",
                "My dog digs everything up.|Rabbits visit the garden.|No pets or pests to worry about.",
                "pets animals pests",
            ),
        ),
    ),
    Request(
        "moving",
        "Help me organize my move.",
        (
            _d(
                "destination",
                1,
                "I'm moving {v}.",
                "across town|to another state|abroad",
                "distance far destination where",
            ),
            _date("move", 1, "June 1|August 15|October 3"),
            _d(
                "home",
                1,
                "I'm moving out of {v}.",
                "a studio apartment|a two-bedroom flat|a three-bedroom house",
                "home size apartment house bedrooms",
            ),
            _budget(2, "$500|$1,500|$4,000"),
            _d(
                "helpers",
                2,
                "{v}",
                "Two friends can help.|I'll need professional movers.|I'm doing it alone.",
                "help helpers movers friends",
            ),
            _d(
                "fragile",
                3,
                "{v}",
                "I have a piano.|I have lots of glassware.|Nothing is especially fragile.",
                "fragile special items",
            ),
        ),
    ),
    Request(
        "blog_post",
        "Write a blog post for my company.",
        (
            _d(
                "topic",
                1,
                "The post is about {v}.",
                "our new app release|remote work tips|our charity day",
                "topic subject",
            ),
            _d("audience", 1, "It's for {v}.", "our customers|potential hires|investors", "audience readers"),
            _d("length", 2, "It should be about {v}.", "500 words|1,000 words|1,500 words", "length words long"),
            _d("tone", 2, "The tone should be {v}.", "casual|professional|playful", "tone style voice"),
            _deadline(3),
            _d(
                "cta",
                3,
                "It should end by asking readers to {v}.",
                "sign up for a demo|apply for a job|follow us on social media",
                "call action ending readers",
            ),
        ),
    ),
    Request(
        "dog_adoption",
        "Help me pick a dog to adopt.",
        (
            _d(
                "home",
                1,
                "I live in {v}.",
                "a small apartment|a house with a big yard|a farmhouse",
                "home live apartment house",
            ),
            _d(
                "time_away",
                1,
                "I'm away {v}.",
                "8 hours a day for work|rarely; I work from home|a few hours a day",
                "time away alone schedule",
            ),
            _d(
                "allergy",
                1,
                "{v}",
                "I'm allergic to dog hair.|Nobody here has allergies.",
                "allergy allergies hair shedding",
            ),
            _d(
                "kids",
                2,
                "{v}",
                "I have two young kids.|No children live with me.|My teenager will help walk it.",
                "kids children family",
            ),
            _d(
                "activity",
                2,
                "I'd like a dog that is {v}.",
                "calm and lazy|up for long runs|moderately active",
                "active energy exercise walks",
            ),
            _d("size", 3, "I'd prefer a {v} dog.", "small|medium-sized|large", "size big small"),
        ),
    ),
    Request(
        "conference_talk",
        "Help me prepare a conference talk.",
        (
            _d(
                "topic",
                1,
                "The talk is about {v}.",
                "our database migration|accessibility in games|teaching kids to code",
                "topic subject about",
            ),
            _d("audience", 1, "The audience is {v}.", "senior engineers|students|managers", "audience attendees who"),
            _d("slot", 1, "The slot is {v} long.", "10 minutes|20 minutes|45 minutes", "slot long minutes length"),
            _d("format", 2, "It's {v}.", "in person|online|a hybrid session", "format online person"),
            _d("demo", 3, "{v}", "I want to include a live demo.|No demos, slides only.", "demo live slides"),
            _d("qa", 3, "{v}", "There are 5 minutes of Q&A.|There is no Q&A.", "questions q&a audience questions"),
        ),
    ),
    Request(
        "car_purchase",
        "Help me buy a car.",
        (
            _budget(1, "$15,000|$30,000|$55,000"),
            _d(
                "use",
                1,
                "I'll use it for {v}.",
                "commuting in the city|family road trips|towing a boat",
                "use purpose driving",
            ),
            _d("seats", 1, "It needs {v} seats.", "two|five|seven", "seats passengers"),
            _d("condition", 2, "I want a {v} car.", "new|used", "new used condition"),
            _d("fuel", 2, "I'd like {v}.", "an electric car|a hybrid|a petrol engine", "fuel electric engine gas"),
            _d("color", 3, "I'd like it in {v}.", "blue|black|red", "color colour paint"),
        ),
    ),
    Request(
        "study_plan",
        "Make me a study plan for my exam.",
        (
            _d(
                "subject",
                1,
                "The exam is in {v}.",
                "organic chemistry|calculus|European history",
                "subject course topic",
            ),
            _d("exam_date", 1, "The exam is {v}.", "in two weeks|in six weeks|in three months", "date when weeks"),
            _d("hours", 1, "I can study {v} a day.", "one hour|three hours|five hours", "hours day study"),
            _d(
                "weakness",
                2,
                "I struggle most with {v}.",
                "memorizing|problem solving|essay writing",
                "struggle weak difficult hard",
            ),
            _d(
                "style",
                3,
                "I learn best {v}.",
                "with flashcards|with practice tests|in a study group",
                "learn style method",
            ),
            _d("weekends", 3, "{v}", "I work on weekends.|My weekends are free.", "weekends schedule free busy"),
        ),
    ),
    Request(
        "home_office",
        "Help me set up a home office.",
        (
            _d(
                "room",
                1,
                "The office will be in {v}.",
                "a corner of the bedroom|a spare room|the garage",
                "room space where",
            ),
            _budget(1, "$400|$1,200|$3,000"),
            _d("work", 2, "I work as {v}.", "a software developer|an illustrator|an accountant", "work job"),
            _d("monitors", 2, "I want {v}.", "one big monitor|two monitors|just my laptop", "monitors screens display"),
            _d(
                "calls",
                2,
                "{v}",
                "I'm on video calls most of the day.|I rarely have calls.",
                "calls video meetings noise",
            ),
            _d(
                "chair",
                3,
                "{v}",
                "I have back pain, so the chair matters.|I already have a good chair.",
                "chair back ergonomic",
            ),
        ),
    ),
    Request(
        "photo_book",
        "Make a photo book for my parents.",
        (
            _d(
                "occasion",
                1,
                "It's for their {v}.",
                "40th wedding anniversary|retirement|Christmas present",
                "occasion event",
            ),
            _deadline(1, "June 5|next month|December 15"),
            _budget(1, "$50|$120|$250"),
            _d("photos", 2, "I have about {v} photos.", "60|150|300", "photos pictures number"),
            _d("pages", 2, "It should have {v} pages.", "20|40|60", "pages size"),
            _d(
                "style",
                3,
                "The style should be {v}.",
                "classic black and white|bright and colorful|minimalist",
                "style look design",
            ),
        ),
    ),
    Request(
        "language_learning",
        "Help me learn a new language.",
        (
            _d("language", 1, "I want to learn {v}.", "Spanish|Japanese|German", "language which"),
            _d(
                "level",
                1,
                "I'm {v}.",
                "a total beginner|at an intermediate level|rusty after school lessons",
                "level experience already",
            ),
            _d("time", 1, "I can spend {v} a day.", "15 minutes|an hour|two hours", "time day minutes"),
            _d(
                "reason",
                2,
                "It's for {v}.",
                "a move abroad next year|talking with my in-laws|a trip in three months",
                "reason why purpose",
            ),
            _d("method", 3, "I prefer {v}.", "apps|a tutor|textbooks", "method way learning"),
            _budget(3, "$0|$50|$200"),
        ),
    ),
    Request(
        "team_offsite",
        "Organize a team offsite.",
        (
            _people("The team has", 1, "8|20|45"),
            _d("days", 1, "It should last {v}.", "one day|two days|three days", "days long duration"),
            _d("goal", 1, "The goal is {v}.", "strategy planning|team bonding|a hackathon", "goal purpose aim"),
            _budget(2, "$5,000|$15,000|$40,000"),
            _d(
                "location",
                2,
                "It should be {v}.",
                "within driving distance|somewhere by the sea|in the mountains",
                "location where place",
            ),
            _d(
                "diet",
                3,
                "{v}",
                "Three people are vegan.|One person keeps kosher.|No dietary needs.",
                "food diet dietary catering",
            ),
        ),
    ),
    Request(
        "business_website",
        "Build a website for my business.",
        (
            _d("business", 1, "My business is {v}.", "a bakery|a yoga studio|a plumbing company", "business company"),
            _d(
                "features",
                1,
                "{v}",
                "Customers must be able to book appointments.|I need online ordering.|It's just for information.",
                "features booking ordering customers",
            ),
            _budget(1, "$1,000|$3,000|$8,000"),
            _d("pages", 2, "It needs {v}.", "a single page|about five pages|a full online shop", "pages size"),
            _d("launch", 2, "It should launch by {v}.", "April 1|the end of summer|next month", "launch deadline date"),
            _d(
                "colors",
                3,
                "Use {v}.",
                "our brand colors, green and white|a dark theme|pastel colors",
                "colors colours design brand",
            ),
        ),
    ),
    Request(
        "picnic",
        "Plan a picnic.",
        (
            _people("There will be", 1, "four|ten|twenty"),
            _d("place", 1, "We'll go to {v}.", "the lake|the city park|the beach", "place where location"),
            _date("picnic", 2, "Saturday|Sunday afternoon|next Friday"),
            _d(
                "food",
                2,
                "{v}",
                "One child is allergic to nuts.|We want sandwiches and fruit.|Everyone brings a dish.",
                "food eat allergies menu",
            ),
            _d("activities", 3, "We'd like to {v}.", "play frisbee|go swimming|fly kites", "activities games play"),
            _d("transport", 3, "We'll get there {v}.", "by bike|by car|on the bus", "transport travel get"),
        ),
    ),
    Request(
        "retirement",
        "Help me plan my retirement savings.",
        (
            _d("age", 1, "I'm {v} years old.", "28|45|58", "age old years"),
            _d("retire_age", 1, "I want to retire at {v}.", "55|62|67", "retire retirement when"),
            _d("savings", 1, "I've saved {v} so far.", "$10,000|$150,000|nothing", "savings saved far already"),
            _d("income", 2, "I earn {v} a year.", "$50,000|$90,000|$140,000", "income earn salary"),
            _d("risk", 2, "My risk tolerance is {v}.", "low|medium|high", "risk tolerance investing"),
            _d(
                "debt",
                3,
                "{v}",
                "I still have student loans.|I have a mortgage.|I have no debt.",
                "debt loans mortgage",
            ),
        ),
    ),
    Request(
        "book_club",
        "Pick a book for my book club.",
        (
            _d("genre", 1, "We like {v}.", "mysteries|science fiction|historical fiction", "genre kind type"),
            _d("meeting", 1, "We meet in {v}.", "two weeks|a month|six weeks", "meet meeting time when"),
            _d("length", 2, "It should be {v}.", "under 300 pages|any length|under 500 pages", "length pages long"),
            _d("recent", 2, "We recently read {v}.", "a thriller|a memoir|a classic", "recently read last previous"),
            _d(
                "content", 2, "{v}", "Please avoid graphic violence.|Anything goes.", "content avoid violence sensitive"
            ),
            _d("members", 3, "We have {v} members.", "5|9|14", "members many"),
        ),
    ),
    Request(
        "apartment",
        "Help me find an apartment.",
        (
            _d("city", 1, "I'm looking in {v}.", "Boston|Berlin|Toronto", "city where area looking"),
            _d("rent", 1, "My rent budget is {v} a month.", "$1,200|$2,000|$3,000", "rent budget month cost"),
            _d("bedrooms", 1, "I need {v}.", "a studio|one bedroom|two bedrooms", "bedrooms rooms size"),
            _d("move_in", 2, "I need to move in by {v}.", "September 1|next month|January", "move date when"),
            _d("pets", 2, "{v}", "I have a cat.|I have a large dog.|I have no pets.", "pets animals"),
            _d("commute", 3, "My commute should be {v}.", "under 20 minutes|under 45 minutes", "commute work travel"),
        ),
    ),
    Request(
        "gift",
        "Help me choose a gift.",
        (
            _d(
                "recipient",
                1,
                "It's for {v}.",
                "my grandfather|my coworker|my 8-year-old niece",
                "who recipient person",
            ),
            _d("occasion", 1, "The occasion is {v}.", "a birthday|a farewell|Christmas", "occasion event"),
            _budget(1, "$20|$60|$150"),
            _d("interests", 2, "They love {v}.", "gardening|video games|cooking", "interests hobbies love"),
            _deadline(3, "Saturday|next week|the 20th"),
            _d(
                "shipping",
                3,
                "{v}",
                "It has to be shipped overseas.|I'll give it in person.",
                "shipping deliver delivery send",
            ),
        ),
    ),
    Request(
        "landlord_email",
        "Write an email to my landlord.",
        (
            _d(
                "issue",
                1,
                "It's about {v}.",
                "a broken heater|a noisy neighbor|ending my lease early",
                "issue problem topic",
            ),
            _d(
                "request",
                1,
                "I want them to {v}.",
                "fix it this week|reduce the rent|return my deposit",
                "request outcome ask want",
            ),
            _d(
                "duration",
                2,
                "It has been going on {v}.",
                "for two weeks|since last month|since I moved in",
                "long since",
            ),
            _d("tone", 2, "The tone should be {v}.", "polite|firm|urgent", "tone style"),
            _d("name", 3, "The landlord's name is {v}.", "Mr. Patel|Ms. Rivera|Dr. Okafor", "name landlord called"),
            _d(
                "contact",
                3,
                "{v}",
                "I've called twice already.|This is my first contact.",
                "contact before already called",
            ),
        ),
    ),
    Request(
        "kitchen_renovation",
        "Plan my kitchen renovation.",
        (
            _budget(1, "$8,000|$25,000|$60,000"),
            _d(
                "size",
                1,
                "The kitchen is {v}.",
                "small, about 8 square meters|large and open-plan|a narrow galley",
                "size big small square",
            ),
            _d(
                "timeline",
                1,
                "It must be done within {v}.",
                "a month|three months|six months",
                "timeline done weeks months",
            ),
            _d("style", 2, "I like a {v} style.", "modern|farmhouse|industrial", "style look design"),
            _d(
                "keep",
                2,
                "{v}",
                "I want to keep my current fridge.|Everything can be replaced.",
                "keep existing current replace",
            ),
            _d("cooking", 3, "I cook {v}.", "every day|rarely|mostly on weekends", "cook often cooking"),
        ),
    ),
    Request(
        "podcast",
        "Help me start a podcast.",
        (
            _d("topic", 1, "It's about {v}.", "local history|personal finance|board games", "topic subject about"),
            _d(
                "frequency",
                1,
                "I want to publish {v}.",
                "weekly|every two weeks|monthly",
                "often frequency publish schedule",
            ),
            _d("audience", 2, "It's for {v}.", "teenagers|retirees|small business owners", "audience listeners"),
            _d("format", 2, "It will be {v}.", "solo|an interview show|a co-hosted chat", "format show"),
            _d(
                "equipment",
                3,
                "I have {v}.",
                "just my phone|a USB microphone|a full studio setup",
                "equipment microphone gear",
            ),
            _d("length", 3, "Episodes should be about {v}.", "20 minutes|an hour", "length long minutes episodes"),
        ),
    ),
    Request(
        "fundraiser",
        "Organize a fundraiser for our school.",
        (
            _d("goal", 1, "We want to raise {v}.", "$2,000|$10,000|$25,000", "goal raise money amount target"),
            _d(
                "cause",
                1,
                "The money is for {v}.",
                "new library books|a class trip|playground repairs",
                "cause purpose",
            ),
            _date("fundraiser", 2, "May 3|October 12|the last Friday of the term"),
            _d("event", 2, "We'd like {v}.", "a bake sale|a fun run|a silent auction", "event type kind"),
            _d("volunteers", 2, "We have {v} volunteers.", "5|15|30", "volunteers helpers"),
            _d("venue", 3, "It will be at {v}.", "the school gym|the town square", "venue where place location"),
        ),
    ),
    Request(
        "instrument",
        "Help me learn to play an instrument.",
        (
            _d("instrument", 1, "I want to play {v}.", "the guitar|the piano|the violin", "instrument which"),
            _d("practice", 1, "I can practise {v} a day.", "20 minutes|an hour", "practice practise time day"),
            _d("music", 2, "I like {v} music.", "rock|classical|jazz", "music style genre"),
            _d("own", 2, "{v}", "I already own one.|I need to buy or rent one.", "own buy rent"),
            _d(
                "goal",
                2,
                "My goal is to {v}.",
                "play at my sister's wedding|join a band|relax after work",
                "goal aim why",
            ),
            _d("teacher", 3, "I prefer {v}.", "a teacher|online videos", "teacher lessons"),
        ),
    ),
    Request(
        "meal_plan",
        "Plan my meals for next week.",
        (
            _people("I'm feeding", 1, "one|two|five"),
            _d("diet", 1, "{v}", "I'm vegan.|I avoid gluten.|I eat everything.", "diet dietary restrictions"),
            _budget(2, "$60|$120|$200"),
            _d("cook_time", 2, "I can cook {v}.", "only on Sunday|every evening for 30 minutes", "cook time when"),
            _d("dislikes", 3, "I don't like {v}.", "mushrooms|fish|spicy food", "dislike hate"),
            _d("goal", 3, "I'm trying to {v}.", "eat more protein|lose weight|save money", "goal trying aim"),
        ),
    ),
    Request(
        "wedding_venue",
        "Find a venue for my wedding.",
        (
            _people("We're inviting", 1, "40|120|250"),
            _d("when", 1, "The wedding is {v}.", "next June|in September|on New Year's Eve", "wedding date when"),
            _budget(1, "$5,000|$20,000|$50,000"),
            _d(
                "setting",
                2,
                "We'd like {v}.",
                "an outdoor garden|a barn|a city hotel ballroom",
                "setting indoor outdoor",
            ),
            _d("near", 2, "It should be near {v}.", "Denver|Austin|Seattle", "near location city"),
            _d(
                "catering",
                3,
                "{v}",
                "We want to bring our own caterer.|The venue should provide catering.",
                "catering caterer food",
            ),
        ),
    ),
    Request(
        "logo",
        "Design a logo for my startup.",
        (
            _d(
                "product",
                1,
                "The company makes {v}.",
                "sustainable sneakers|budgeting software|dog treats",
                "company product makes",
            ),
            _d("name", 1, "The company is called {v}.", "Greenstep|Penny|Wagly", "name called"),
            _d("colors", 2, "I'd like {v}.", "green tones|black and gold|bright orange", "colors colour palette"),
            _d("style", 2, "The style should be {v}.", "minimal|playful|vintage", "style feel"),
            _d(
                "usage", 3, "It will mainly appear {v}.", "on shoe boxes|as an app icon|on social media", "usage appear"
            ),
            _deadline(3),
        ),
    ),
    Request(
        "date_night",
        "Plan a date night.",
        (
            _d("day", 1, "It's on {v}.", "Friday night|Saturday afternoon|our anniversary next week", "day when"),
            _budget(1, "$60|$150|$400"),
            _d(
                "partner", 2, "My partner loves {v}.", "live music|Italian food|the outdoors", "partner loves interests"
            ),
            _d(
                "dietary",
                2,
                "{v}",
                "My partner doesn't drink alcohol.|I'm vegetarian.|We eat and drink anything.",
                "diet drink restrictions",
            ),
            _d("surprise", 3, "{v}", "It's a surprise.|We'll plan it together.", "surprise together"),
            _d("transport", 3, "We'll get around {v}.", "on foot|by car|by taxi", "transport around travel"),
        ),
    ),
)


def detail_value(importance: int) -> float:
    """Reward of covering one detail of ``importance`` alone."""
    return IMPORTANCE_VALUE[importance]


def make_task(split: str, index: int) -> Task:
    """Task ``index`` of ``split``: a request, 3-6 of its details and their values (deterministic)."""
    attempt = 0
    while True:
        rng = random.Random(task_seed(GYM, split, index, attempt))
        req = rng.choice(REQUESTS)
        k = rng.randint(MIN_DETAILS, min(MAX_DETAILS, len(req.details)))
        chosen = sorted(rng.sample(range(len(req.details)), k))
        values = {req.details[i].name: rng.choice(req.details[i].values) for i in chosen}
        content = {"request": req.name, "details": values}
        key = json.dumps(content, sort_keys=True)
        if split_of(key) == split:
            break
        attempt += 1
    facts = []
    for i in chosen:
        d = req.details[i]
        facts.append(
            Fact(
                key=f"detail.{d.name}",
                kind="detail",
                text=d.text.replace("{v}", values[d.name]),
                keywords=d.keywords,
                importance=d.importance,
            )
        )
    prompt = (
        f"{req.prompt} (Some details are missing: ask me about them, one question at a time, then give a "
        "short summary of the plan as your answer.)"
    )
    task_id = f"{GYM}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    return Task(
        gym=GYM,
        task_id=task_id,
        split=split,
        prompt=prompt,
        facts=facts,
        secret="",
        data={"request": req.name, "details": values, "weights": {f.key: detail_value(f.importance) for f in facts}},
    )


def claims_of(task: Task) -> list[Claim]:
    """The hidden details as claims a reply is checked against (``harness.users.fidelity``): a
    sentence with one of a detail's keywords that names another value of its pool ("My budget is
    $800" when it is $300) contradicts the task."""
    request = next(r for r in REQUESTS if r.name == task.data["request"])
    out = []
    for d in request.details:
        value = task.data["details"].get(d.name)
        if value is not None:
            # the detail's own sentence words count as its words too ("The party is on ...": party)
            own = tuple(w for w in re.findall(r"[a-z]+", d.text.lower()) if len(w) >= 4 and w not in _FRAME_WORDS)
            out.append(
                Claim(f"detail.{d.name}", (*d.keywords, *own), (value,), tuple(v for v in d.values if v != value))
            )
    return out


def covered_share(task: Task, covered: set[str]) -> float:
    """Importance-weighted share of the task's details in ``covered`` (fact keys)."""
    weights: dict[str, float] = task.data["weights"]
    total = sum(weights.values())
    return sum(w for k, w in weights.items() if k in covered) / total if total else 0.0


def _answers_of(record: dict[str, Any]) -> list[tuple[float, float]]:
    """The scored answers of a recorded intention episode: ``(share, threshold)``."""
    return [
        (float(t["answer"]["details"]["share"]), float(t["answer"]["details"]["threshold"]))
        for t in record["turns"]
        if record["gym"] == GYM and t.get("answer") and "share" in (t["answer"].get("details") or {})
    ]


ANSWER_SUCCESS = override_point(
    "intention.answer_success",
    default=lambda share, threshold: share >= threshold,
    params=("share", "threshold"),
    returns=bool,
    doc="Whether an intention answer succeeds. ``share``: the importance-weighted share of the task's "
    "details the questions covered (0..1); ``threshold``: env.success_threshold. Default: "
    "``share >= threshold``.",
    samples=[(0.0, 0.7), (0.7, 0.7), (1.0, 0.7), (0.5, 0.0)],
    replay=_answers_of,
)


@register
class IntentionEnv(UserCentricEnv):
    """Intent clarification: ask about the missing details of a vague request, then summarise."""

    name = GYM
    allowed_choices = ("ask", "answer")
    fact_kinds = ("detail",)
    description = (
        "Clarification: the user's request leaves out important details. Ask focused questions, "
        "one detail at a time, then answer with a short summary of the plan."
    )

    def generate_task(self, split: str, index: int) -> Task:
        return make_task(split, index)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self.covered: set[str] = set()
        return obs, info

    def check_reply(self, question: str, reply: UserReply) -> ReplyCheck:
        """A reply that states another value of a hidden detail's pool (:func:`claims_of`)."""
        assert self.task is not None
        return check_claims(reply.text, claims_of(self.task))

    def on_ask(self, question: str, reply: UserReply) -> tuple[float, list[str]]:
        assert self.task is not None
        weights = self.task.data["weights"]
        new = [f for f in reply.revealed if f.key in weights and f.key not in self.covered]
        new = list({f.key: f for f in new}.values())  # one credit per detail even if listed twice
        if not new:
            return 0.0, []
        self.covered.update(f.key for f in new)
        reward = sum(weights[f.key] for f in new) / len(new)  # the several-at-once discount
        events = ["detail_covered"] + (["multi_detail_question"] if len(new) > 1 else [])
        return reward, events

    def on_answer(self, content: str) -> AnswerResult:
        assert self.task is not None
        share = covered_share(self.task, self.covered)
        threshold = float(self.env_knobs["success_threshold"])
        ok = ANSWER_SUCCESS(self.knobs, share, threshold)
        n, total = len(self.covered), len(self.task.facts)
        feedback = (
            f"Thanks! You clarified {n} of {total} missing details (weighted share {share:.2f}; "
            f"{'enough' if ok else 'not enough'} for a good plan)."
        )
        return AnswerResult(
            0.0, ok, True, feedback, {"covered": sorted(self.covered), "share": share, "threshold": threshold}
        )
