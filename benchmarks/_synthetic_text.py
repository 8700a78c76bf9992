"""The words of the synthetic check (``synthetic.py``): the values a user's facts are drawn
from, how the user states each fact, how the assistant answers, the small talk around them,
and each question's wordings with the facts that answer it. Data only; no tuning looked at the
systems' results when these were written."""

from __future__ import annotations

# --- what the generator draws from -------------------------------------------------------------

NAMES = [("Maya", "she"), ("Jonas", "he"), ("Priya", "she"), ("Tomasz", "he"), ("Leila", "she")]
NAMES += [("Kwame", "he"), ("Sofia", "she"), ("Diego", "he"), ("Hana", "she"), ("Owen", "he")]
NAMES += [("Ines", "she"), ("Rafael", "he"), ("Yuki", "she"), ("Malik", "he"), ("Clara", "she")]
NAMES += [("Viktor", "he"), ("Amara", "she"), ("Felix", "he"), ("Noor", "she"), ("Arjun", "he")]
OTHERS = ["Ben", "Lucia", "Ravi", "Greta", "Sam", "Mei", "Oscar", "Zara", "Pablo", "Elin"]
OTHERS += ["Hugo", "Tara", "Nils", "Aiko", "Marco", "Rosa", "Ibrahim", "Lena", "Theo", "Ada"]
CITIES = ["Denver", "Lisbon", "Toronto", "Melbourne", "Seattle", "Glasgow", "Austin", "Dublin"]
CITIES += ["Portland", "Vienna", "Montreal", "Auckland", "Boston", "Rotterdam", "Valencia"]
CITIES += ["Nashville", "Copenhagen", "Edinburgh", "Phoenix", "Helsinki", "Kyoto", "Porto"]
JOBS = [("nurse", "Hospital"), ("software engineer", "Labs"), ("accountant", "Partners")]
JOBS += [("pastry chef", "Bakery"), ("architect", "Studio"), ("pharmacist", "Pharmacy")]
JOBS += [("graphic designer", "Agency"), ("electrician", "Electric"), ("paralegal", "Law")]
JOBS += [("physiotherapist", "Clinic"), ("data analyst", "Analytics"), ("librarian", "Library")]
BRANDS = ["Riverside", "Northwind", "Cedar", "Summit", "Bluebird", "Harbor", "Juniper", "Oakline"]
BRANDS += ["Silverleaf", "Granite", "Lakeview", "Brightwater", "Foxglove", "Ironbridge"]
SPECIES = ["cat", "dog", "rabbit", "parrot", "hamster", "tortoise", "ferret", "guinea pig"]
PETS = ["Biscuit", "Pepper", "Miso", "Ziggy", "Luna", "Waffles", "Noodle", "Pickles", "Olive"]
PETS += ["Mango", "Scout", "Tofu", "Clementine", "Gizmo", "Juniper", "Pudding"]
CUISINES = ["Thai", "Mexican", "Ethiopian", "Korean", "Lebanese", "Peruvian", "Vietnamese"]
CUISINES += ["Greek", "Japanese", "Indian", "Georgian", "Sichuan", "Moroccan", "Turkish"]
INSTRUMENTS = ["cello", "ukulele", "saxophone", "violin", "drums", "piano", "banjo", "flute"]
ALLERGENS = ["peanut", "shellfish", "sesame", "kiwi", "hazelnut", "soy", "strawberry"]
SPORTS = ["rock climbing", "rowing", "fencing", "trail running", "kayaking", "bouldering"]
SPORTS += ["swimming", "cycling", "surfing", "badminton"]
SIBLINGS = [("sister", "she"), ("brother", "he")]

# --- what the user says: a fact's kind -> its wordings ----------------------------------------

SAY: dict[str, list[str]] = {
    "home": [
        "It's been raining for a week straight here in {city}, typical for this time of year.",
        "I've lived in {city} for about six years now and I still get lost downtown.",
        "Rent in {city} went up again, my landlord just told me.",
    ],
    "move": [
        "Big news: I moved to {city} last week, and the boxes are still everywhere.",
        "The movers finally dropped off the last of my furniture at the new apartment in {city}.",
        "I've officially relocated to {city}; my new place is a short walk from the river.",
    ],
    "job1": [
        "I work as {a_role} at {employer}, mostly early shifts.",
        "Long day at {employer} again; being {a_role} there means nonstop meetings.",
        "I've been {a_role} at {employer} for three years now.",
    ],
    "job2": [
        "Just finished my first week as {a_role} at {employer}, and the team here is lovely.",
        "I accepted an offer from {employer}: I start as {a_role} on Monday, ten minutes from "
        "my new flat.",
        "New job update: I'm now {a_role} at {employer}, a nice change from my old workplace.",
    ],
    "partner1": [
        "My {partner_word} {partner} surprised me with concert tickets last night.",
        "{partner} and I have been together two years; {pp} still laughs at my terrible jokes.",
        "{partner}, my {partner_word}, cooked a huge lasagna for us on Sunday.",
    ],
    "breakup": [
        "{old_partner} and I broke up. It was mutual, but the flat feels really quiet now.",
        "Not a great week: {old_partner} and I decided to split up after a long talk.",
    ],
    "partner2": [
        "I've started seeing someone new! {partner} and I met at a friend's barbecue.",
        "Had a third date with {partner} yesterday; I think this could turn into something real.",
        "So I'm officially dating {partner} now, we met through a friend of a friend.",
    ],
    "partner_job": [
        "{partner} just got promoted; {pp} has been {a_partner_role} for years and now leads "
        "the team.",
        "{partner} was stuck at work until midnight again, the life of {a_partner_role}.",
        "{partner} told me all about {ppos} day as {a_partner_role} over dinner.",
    ],
    "pet1": [
        "My {species} {pet} knocked a glass off the table this morning.",
        "{pet}, my {species}, has to go to the vet for a check-up on Friday.",
        "Spent the evening brushing {pet}; that {species} sheds like crazy.",
    ],
    "pet2": [
        "We adopted a {species} from the shelter and named it {pet}.",
        "Meet the newest member of the family: a little {species} called {pet}.",
        "I brought home a {species} on Sunday; {pet} is still hiding under the sofa.",
    ],
    "cuisine1": [
        "I could eat {cuisine} food every single day, honestly.",
        "Tried another {cuisine} restaurant tonight, still my favourite kind of food.",
    ],
    "cuisine2": [
        "Funny, I've completely gone off {old_cuisine}; these days it's {cuisine} food for me.",
        "My taste has changed: {cuisine} is my go-to now, {old_cuisine} just doesn't do it.",
    ],
    "sibling": [
        "My {sibling_rel} {sibling} is coming to stay with me next weekend.",
        "Had a long call with my {sibling_rel} {sibling} last night, we talked for hours.",
    ],
    "sib_city": [
        "{sibling} finally moved to {sib_city} for the new semester.",
        "{sibling} sent photos from {spos} new flat in {sib_city}; the view is amazing.",
    ],
    "instrument": [
        "I practised the {instrument} for an hour after dinner.",
        "My {instrument} teacher says I'm finally ready for the recital.",
    ],
    "allergy": [
        "Had to skip dessert at the party, my {allergen} allergy again.",
        "Ended up with hives after a salad; turns out it had {allergen} in it. Never again.",
    ],
    "sport": [
        "Went {sport} with the club on Saturday morning, my legs are done.",
        "I've signed up for a {sport} competition in the autumn.",
    ],
}

# The assistant's answer to a fact: "{echo}" names the value in about half of them.
REPLY: dict[str, tuple[str, str]] = {
    "home": (
        "Sounds like you know your neighbourhood well.{echo} Anything you'd change?",
        " {city} has a lot going for it.",
    ),
    "move": (
        "Congratulations on the move! Unpacking always takes longer than planned.{echo} "
        "Take it one room at a time.",
        " I hope you love {city}.",
    ),
    "job1": (
        "That sounds like a demanding role.{echo} Make sure you also get time to recharge.",
        " {employer} must keep you busy.",
    ),
    "job2": (
        "A new job is exciting and tiring at once.{echo} "
        "Give yourself a few weeks to find your rhythm.",
        " Good luck at {employer}!",
    ),
    "partner1": (
        "That's lovely to hear.{echo} Small gestures like that matter.",
        " {partner} sounds thoughtful.",
    ),
    "breakup": (
        "I'm sorry, breakups are hard even when they are mutual.{echo} Be kind to yourself.",
        "",
    ),
    "partner2": (
        "How exciting! New relationships have such a nice energy.{echo}",
        " I hope things go well with {partner}.",
    ),
    "partner_job": (
        "That sounds like a demanding job.{echo} It's nice that you talk about your days.",
        " Being {a_partner_role} is not easy.",
    ),
    "pet1": (
        "Animals really do have their own personalities!{echo}",
        " {pet} sounds like a character.",
    ),
    "pet2": (
        "Congratulations on the new arrival!{echo} A quiet corner helps them settle in.",
        " {pet} is a great name.",
    ),
    "cuisine1": (
        "Good food makes a day better.{echo} Want a recipe to try at home?",
        " {cuisine} dishes can be easy to cook.",
    ),
    "cuisine2": (
        "Tastes change over time, that's normal.{echo}",
        " {cuisine} food has so much variety.",
    ),
    "sibling": (
        "Family time is precious.{echo} I hope you get to catch up properly.",
        " Say hi to {sibling}!",
    ),
    "sib_city": (
        "What a big step!{echo} Moving for studies is a great adventure.",
        " {sib_city} is a lovely place to live.",
    ),
    "instrument": (
        "Practice is what makes the difference.{echo} Keep going!",
        " The {instrument} is a rewarding instrument.",
    ),
    "allergy": (
        "That must be frustrating.{echo} A card listing your allergy can help when eating out.",
        "",
    ),
    "sport": (
        "That's a great way to stay fit.{echo} Remember to stretch afterwards.",
        " {sport} is a fun one.",
    ),
}

SMALL_TALK = [
    "Did you watch the game last night? What a finish.",
    "It's so hot today, I'm hiding inside with the fan on.",
    "I'm trying to read more this year; any good mystery novels?",
    "Made pancakes this morning and burnt the first three.",
    "My phone screen cracked again, I need a better case.",
    "The traffic this morning was unbelievable.",
    "I've been binge-watching a baking show, it's oddly relaxing.",
    "Any tips for sleeping better? I keep waking up at 4 am.",
    "I finally cleaned out my closet and found clothes from ten years ago.",
    "What's a good recipe for a quick weeknight dinner?",
    "I think I need a holiday, work has been a lot.",
    "Can you recommend a podcast for long walks?",
    "My laptop keeps freezing when I open too many tabs.",
    "Went to a farmers' market and bought way too many tomatoes.",
    "I'm thinking of learning a new language, maybe Italian.",
    "The neighbours are renovating and the drilling starts at 7 am.",
    "I tried meditation for ten minutes and fell asleep.",
    "How do I get coffee stains out of a white shirt?",
    "It snowed a little overnight and everything looks magical.",
    "My plants are dying, I think I overwater them.",
    "I need a birthday gift idea for a coworker.",
    "I spent the afternoon on a 1000-piece puzzle.",
]
# Other people's facts, drawn from values the user never has.
OTHERS_SAY = [
    "My coworker {other} is moving to {city} next month, I'll miss them.",
    "My friend {other} just got a job as {a_role} at {employer}.",
    "My neighbour's {species} {pet} barks every time the doorbell rings.",
    "{other} from book club swears {cuisine} food is the best in town.",
    "My cousin {other} plays the {instrument} in a band.",
    "{other} went on a trip to {city} and sent me photos.",
]
GENERIC_REPLY = [
    "That sounds like a lot! It might help to take a short break and come back to it with fresh "
    "eyes. Let me know if you want a few concrete suggestions.",
    "Good question. A few things usually help: start small, keep it regular, and notice what "
    "actually makes a difference for you.",
    "Ha, that happens to everyone at some point. Is there anything I can help you plan or look up?",
    "I hear you. Sometimes the simplest fix is the right one; if it keeps happening, we can go "
    "through it step by step.",
    "That sounds nice! Little moments like that are worth noticing. How did the rest of your "
    "day go?",
]

ASK: dict[str, tuple[str, list[str]]] = {
    "instrument": (
        "single-fact",
        [
            "What instrument does {name} play?",
            "Which musical instrument is {pro} learning?",
            "What does {name} practise in the evenings?",
        ],
    ),
    "allergy": (
        "single-fact",
        [
            "What is {name} allergic to?",
            "Which food can't {pro} eat?",
            "What does {name} react badly to?",
        ],
    ),
    "sport": (
        "single-fact",
        [
            "What sport does {name} do?",
            "How does {pro} stay active?",
            "What does {name} do with the club at weekends?",
        ],
    ),
    "sibling": (
        "single-fact",
        [
            "What is the name of {name}'s {sibling_rel}?",
            "What is {pos} {sibling_rel} called?",
            "Who is {name}'s {sibling_rel}?",
        ],
    ),
    "city_now": (
        "updated-fact",
        [
            "Where does {name} live now?",
            "Which city is {pro} living in these days?",
            "What city is home for {name} at the moment?",
        ],
    ),
    "job_now": (
        "updated-fact",
        [
            "What does {name} do for a living now?",
            "Where does {pro} work these days?",
            "What is {name}'s current job?",
        ],
    ),
    "partner_now": (
        "updated-fact",
        [
            "Who is {name} dating now?",
            "Who is {pos} current partner?",
            "Who is {name} in a relationship with at the moment?",
        ],
    ),
    "pet_now": (
        "updated-fact",
        [
            "What is the name of {name}'s newest pet?",
            "Which animal did {pro} most recently adopt?",
            "What is {pos} latest pet called?",
        ],
    ),
    "cuisine_now": (
        "updated-fact",
        [
            "What kind of food does {name} like these days?",
            "What is {pos} favourite cuisine now?",
            "What food does {name} prefer lately?",
        ],
    ),
    "job_city": (
        "multi-hop",
        [
            "In which city is {name}'s current workplace?",
            "Which city does {pro} work in now?",
            "In what city is {pos} new employer?",
        ],
    ),
    "partner_job": (
        "multi-hop",
        [
            "What does {name}'s current partner do for work?",
            "What is the job of the person {pro} is dating now?",
            "What does {pos} new partner do for a living?",
        ],
    ),
    "sibling_city": (
        "multi-hop",
        [
            "Which city does {name}'s {sibling_rel} live in?",
            "Where is {pos} {sibling_rel} living now?",
            "In which city did {name}'s {sibling_rel} settle?",
        ],
    ),
    "city_before": (
        "temporal",
        [
            "Where did {name} live before moving to {city2}?",
            "Which city was {pro} in before the move to {city2}?",
            "What city did {name} leave when {pro} moved to {city2}?",
        ],
    ),
    "move_when": (
        "temporal",
        [
            "When did {name} move to {city2}?",
            "In which month did {pro} relocate to {city2}?",
            "When did {name} start living in {city2}?",
        ],
    ),
    "job_before": (
        "temporal",
        [
            "What was {name}'s job before the move?",
            "What did {pro} do for work before moving?",
            "Where did {name} work before relocating?",
        ],
    ),
    "month": (
        "temporal",
        [
            "What changed in {name}'s life in {month}?",
            "What news did {pro} share in {month}?",
            "What happened to {name} in {month}?",
        ],
    ),
}

# question kind -> (gold fact kinds, stale fact kinds); "month" is worked out from the dates
GOLD: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "instrument": (("instrument",), ()),
    "allergy": (("allergy",), ()),
    "sport": (("sport",), ()),
    "sibling": (("sibling",), ()),
    "city_now": (("move",), ("home",)),
    "job_now": (("job2",), ("job1",)),
    "partner_now": (("partner2",), ("partner1",)),
    "pet_now": (("pet2",), ("pet1",)),
    "cuisine_now": (("cuisine2",), ("cuisine1",)),
    "job_city": (("move", "job2"), ()),
    "partner_job": (("partner2", "partner_job"), ()),
    "sibling_city": (("sibling", "sib_city"), ()),
    "city_before": (("home",), ()),
    "move_when": (("move",), ()),
    "job_before": (("job1",), ()),
}
EVENTS = ("move", "job2", "breakup", "partner2", "pet2", "cuisine2", "sib_city")

# --- long assistant replies (``--long-replies``) -----------------------------------------------
# A chat model answers at length and restates what it was told: the reply right after a fact
# names its value again, and every long reply carries advice on any topic, so that it shares
# words with questions it has nothing to do with. Never gold: the user's turn is.

RESTATE: dict[str, list[str]] = {
    "home": [
        "Having lived in {city} for a while, you probably know which neighbourhoods flood and "
        "which cafés open early.",
        "{city} rewards people who stay: the longer you live there, the more small places "
        "you find.",
    ],
    "move": [
        "Settling into {city} takes a few months, so be patient with yourself.",
        "When people move to {city}, the first thing that helps is finding a local café, a "
        "grocery store and a walking route near the new apartment.",
    ],
    "job1": [
        "Being {a_role} at {employer} sounds like it asks a lot of your time and energy.",
        "Many people who work as {a_role} say the first years are the hardest.",
    ],
    "job2": [
        "Starting as {a_role} at {employer} is a big change, and the first weeks are for learning.",
        "A new role as {a_role} usually means new people, new tools and new habits.",
    ],
    "partner1": [
        "It sounds like {partner} really cares about you.",
        "Relationships like yours with {partner} grow through small shared moments.",
    ],
    "breakup": [
        "Ending things with {old_partner} must have been hard, even if it was the right call.",
        "After a breakup, routines and friends help more than anything else.",
    ],
    "partner2": [
        "Meeting {partner} sounds like a lovely start.",
        "Early dates with someone like {partner} are a good time to learn what you both enjoy.",
    ],
    "partner_job": [
        "Working as {a_partner_role} is demanding, and {partner} is lucky to have your support.",
        "Long shifts as {a_partner_role} can be draining, so evenings together matter.",
    ],
    "pet1": [
        "A {species} like {pet} needs play, a routine and regular check-ups.",
        "Every {species} has its own habits, and {pet} sounds like no exception.",
    ],
    "pet2": [
        "A new {species} needs a few weeks to feel at home, so give {pet} a quiet corner.",
        "Shelter animals like {pet} often bond strongly once they trust you.",
    ],
    "cuisine1": [
        "{cuisine} cooking has so many dishes worth trying at home.",
        "If you love {cuisine} food, a cooking class could be fun.",
    ],
    "cuisine2": [
        "Switching from {old_cuisine} to {cuisine} food is a fun change of taste.",
        "{cuisine} dishes are a great thing to explore now that {old_cuisine} has lost its charm.",
    ],
    "sibling": [
        "Time with your {sibling_rel} {sibling} sounds precious.",
        "Siblings like {sibling} often become closer as adults.",
    ],
    "sib_city": [
        "Moving to {sib_city} is a big adventure for {sibling}.",
        "{sib_city} is a great place to study and meet new people.",
    ],
    "instrument": [
        "The {instrument} takes patience, and regular practice pays off.",
        "Playing the {instrument} in front of others is the best way to grow.",
    ],
    "allergy": [
        "A {allergen} allergy means checking labels and asking in restaurants.",
        "Carrying your medication helps when {allergen} turns up in a dish unexpectedly.",
    ],
    "sport": [
        "{sport} is a great way to stay strong and meet people.",
        "With {sport}, warming up and resting well matter as much as training.",
    ],
}

ADVICE = [
    "Here are a few things that usually help.",
    "First, keep a simple routine: the same time to wake up, eat and wind down each day.",
    "Second, make a short list of what matters this week and leave the rest for later.",
    "If work feels heavy, a short walk at lunch or a proper break between meetings can help.",
    "When you move to a new city, joining a club or a class is a quick way to meet people.",
    "For a new job, asking questions early saves a lot of time later.",
    "Cooking at home with a partner or a friend turns dinner into something to look forward to.",
    "Pets need routine too: regular meals, play and a visit to the vet once a year.",
    "Family calls are easier to keep up when they happen on the same evening every week.",
    "Music practice works best in short daily sessions rather than one long weekend session.",
    "Any sport you enjoy is better than the perfect one you never do.",
    "If you travel, pack a day early and keep your documents in one place.",
    "Sleep matters more than most people think: a dark room and no screens late help.",
    "Budgeting gets easier when rent, food and savings each have their own account.",
    "For food allergies, tell the restaurant before you order, not after.",
    "Friends who listen are worth more than advice, so lean on them.",
    "A new relationship is a good time to talk about what each of you needs.",
    "Try to notice what gives you energy and what drains it, and plan around that.",
    "If you feel stuck, writing things down for ten minutes can clear your head.",
    "Small wins add up: finishing one thing today beats starting five.",
    "Learning something new, a language or an instrument, keeps the mind fresh.",
    "When plans change, it is fine to change your goals with them.",
    "A weekend outdoors, hiking or by the water, resets a busy week.",
    "Neighbours can be a great help once you get to know them.",
    "It helps to celebrate the changes in your life, the big moves and the small ones.",
    "Keep in touch with the people you care about, even with a short message.",
    "Let me know if you want a more detailed plan, a checklist or some recipes.",
    "I am happy to help you think it through step by step.",
]
