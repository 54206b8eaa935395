"""Text pools for realistic records, and the awkward identifiers every scale must contain so clients
prove they percent-encode path parameters (`/`, `?`, `#`, spaces, `%`, non-ASCII)."""

from __future__ import annotations

FIRST_NAMES = (
    "Amélie",
    "Jürgen",
    "Søren",
    "Zoë",
    "Łukasz",
    "Ana",
    "Björn",
    "Chloé",
    "Dmitri",
    "Élodie",
    "Fatima",
    "Giulia",
    "Hiroshi",
    "Inès",
    "José",
    "Kateřina",
    "Liam",
    "Maëlle",
    "Nikolaï",
    "Olga",
    "Paulo",
    "Quentin",
    "Rūta",
    "Siobhán",
    "Tomás",
    "Umut",
    "Věra",
    "Wen",
    "Xiadani",
    "Yasmine",
    "Zoltán",
    "Ōtani",
    "李娜",
    "Ελένη",
)
LAST_NAMES = (
    "Dupont",
    "Müller",
    "Ødegaard",
    "García",
    "Nowak",
    "Rossi",
    "Sánchez",
    "O'Brien",
    "Lefèvre",
    "Kowalczyk",
    "Nakamura",
    "Novák",
    "Þórsson",
    "Çelik",
    "Andersson",
    "Da Silva",
    "Van der Berg",
    "Ivanova",
    "王",
    "Παππάς",
)
LOCALES = ("fr-FR", "en-GB", "en-US", "de-DE", "es-ES", "it-IT", "pt-BR", "ja-JP", "pl-PL")
TOPICS = (
    "Sécurité au travail",
    "Négociation commerciale",
    "Hygiène & qualité",
    "Onboarding 2026",
    "RGPD — les bases",
    "Excel avancé",
    "Leadership bienveillant",
    "Gestes d'urgence",
    "Cybersécurité: phishing",
    "Vente en boutique",
    "Écoute active",
    "Prévention des risques",
    "Management à distance",
    "Service client ★",
    "Éco-conduite",
    "Lean & 5S",
    "Diversité et inclusion",
    "Anti-corruption",
    "Gestion du temps",
    "Prise de parole en public",
)
LEVEL_WORDS = ("Module", "Parcours", "Quiz", "Atelier", "Capsule", "Défi")
GROUP_WORDS = (
    "Ventes",
    "Marketing",
    "Logistique",
    "Support",
    "R&D",
    "Finance",
    "RH",
    "Boutiques",
    "Siège",
    "Entrepôt",
)
CITIES = ("Paris", "Lyon", "Zürich", "São Paulo", "Kraków", "Montréal", "Bruxelles", "Genève", "Łódź", "Köln")
CATEGORY_NAMES = (
    "Conformité",
    "Savoir-être",
    "Produits",
    "Sécurité",
    "Outils numériques",
    "Management",
    "Vente",
    "Qualité",
    "Langues",
    "Santé",
    "Intégration",
    "Finance",
    "Environnement",
    "Juridique",
    "Innovation",
    "Bien-être",
)
ANSWER_WORDS = ("oui", "non", "peut-être", "toujours", "jamais", "d'abord la sécurité", "le client", "l'équipe")

# Path-parameter traps, present at every scale. A client that does not percent-encode gets a 404 or,
# worse, the decoy (a '%41' left unencoded is decoded by the server to 'A').
SPECIAL_USER_IDS = ("u 007 jean-pierre", "usr/ünïcode?#1", "anne%41b")
DECOY_USER_ID = "anneAb"
SPECIAL_LESSON_IDS = ("lesson/α β?#%2F", "leçon 100% #2")
SPECIAL_GROUPS = (
    # (id, uniqueName, title)
    ("grp/ventes#1 ?été", "Ventes / Paris #1 ?été", "Ventes / Paris #1 ?été"),
    ("grp 100%", "R&D 100% / Zürich", "R&D 100% — Zürich"),
)
SPECIAL_SESSION_ID = "sess/été #1?"
SPECIAL_CATEGORY_ID = "cat/qualité #1"
