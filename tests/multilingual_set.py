"""The multilingual full-text set: per language, a fact, queries that share one of its words in another
inflection (for Chinese, Japanese and Korean a sub-word), and 50 distractor facts on other topics.

Used by tests/test_multilingual.py (the text-only path must rank the fact first) and by
bench/retrieval_quality.py (which prints the ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

DISTRACTORS = 50


@dataclass(frozen=True)
class Case:
    fact: str
    queries: tuple[str, ...]


CASES: dict[str, Case] = {
    "en": Case("Maya adopted two puppies from the shelter last spring.", ("Who has a puppy?", "adoption")),
    "de": Case("Wir haben im Sommer drei Häuser am See gebaut.", ("Wer besitzt ein Haus?", "Hauses")),
    "fr": Case("Mes enfants adorent les chevaux de la ferme voisine.", ("Qui aime le cheval ?", "fermes")),
    "es": Case("Mi abuela cocinaba tortillas deliciosas cada domingo.", ("¿Quién cocina una tortilla?",)),
    "ru": Case("Прошлым летом мы ездили в Москву к бабушке.", ("Кто был в Москве?", "бабушка")),
    "ja": Case("私の名前は太郎です", ("太郎", "名前は何ですか")),
    "zh": Case("我哥哥在北京大学学习计算机科学", ("北京", "谁学计算机")),
    "ko": Case("저는 작년에 부산으로 이사했어요", ("부산에서", "이사")),
}

# Five subjects times ten predicates per language: 50 facts, none sharing the case's word.
_PARTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "en": (("My brother", "Our neighbour", "The teacher", "Anna", "My grandfather"),
           ("plays the violin every evening.", "works at the city library.", "grew tomatoes in the garden.",
            "travels to Italy each summer.", "reads detective novels on the train.", "drinks green tea in the morning.",
            "fixed the old bicycle yesterday.", "sings in a church choir.", "collects stamps from Africa.",
            "studies chemistry at the university.")),
    "de": (("Mein Bruder", "Unsere Nachbarin", "Der Lehrer", "Anna", "Mein Großvater"),
           ("spielt jeden Abend Geige.", "arbeitet in der Stadtbibliothek.", "pflanzt Tomaten im Garten.",
            "reist jeden Sommer nach Italien.", "liest Krimis im Zug.", "trinkt morgens grünen Tee.",
            "hat gestern das alte Fahrrad repariert.", "singt in einem Chor.", "sammelt Briefmarken aus Afrika.",
            "studiert Chemie an der Universität.")),
    "fr": (("Mon frère", "Notre voisine", "Le professeur", "Anna", "Mon grand-père"),
           ("joue du violon chaque soir.", "travaille à la bibliothèque municipale.",
            "cultive des tomates dans le jardin.", "voyage en Italie chaque été.",
            "lit des romans policiers dans le train.", "boit du thé vert le matin.",
            "a réparé le vieux vélo hier.", "chante dans une chorale.", "collectionne des timbres d'Afrique.",
            "étudie la chimie à l'université.")),
    "es": (("Mi hermano", "Nuestra vecina", "El profesor", "Ana", "Mi abuelo"),
           ("toca el violín cada noche.", "trabaja en la biblioteca municipal.", "cultiva tomates en el jardín.",
            "viaja a Italia cada verano.", "lee novelas policiacas en el tren.", "bebe té verde por la mañana.",
            "arregló la bicicleta vieja ayer.", "canta en un coro.", "colecciona sellos de África.",
            "estudia química en la universidad.")),
    "ru": (("Мой брат", "Наша соседка", "Учитель", "Анна", "Мой дедушка"),
           ("играет на скрипке каждый вечер.", "работает в городской библиотеке.",
            "выращивает помидоры в саду.", "путешествует по Италии каждое лето.",
            "читает детективы в поезде.", "пьёт зелёный чай по утрам.", "вчера починил старый велосипед.",
            "поёт в хоре.", "собирает марки из Африки.", "изучает химию в университете.")),
    "ja": (("兄は", "隣の人は", "先生は", "花子さんは", "祖父は"),
           ("毎晩バイオリンを弾きます", "市立図書館で働いています", "庭でトマトを育てています",
            "毎年夏にイタリアへ旅行します", "電車で推理小説を読みます", "朝に緑茶を飲みます",
            "昨日古い自転車を直しました", "合唱団で歌っています", "アフリカの切手を集めています",
            "大学で化学を勉強しています")),
    "zh": (("我弟弟", "我们的邻居", "那位老师", "安娜", "我爷爷"),
           ("每天晚上拉小提琴", "在市图书馆工作", "在花园里种西红柿", "每年夏天去意大利旅行",
            "在火车上看侦探小说", "早上喝绿茶", "昨天修好了旧自行车", "在合唱团唱歌", "收集非洲的邮票",
            "在大学研究化学")),
    "ko": (("제 동생은", "우리 이웃은", "선생님은", "안나는", "할아버지는"),
           ("매일 저녁 바이올린을 켜요", "시립 도서관에서 일해요", "정원에서 토마토를 키워요",
            "매년 여름 이탈리아로 여행해요", "기차에서 추리 소설을 읽어요", "아침마다 녹차를 마셔요",
            "어제 낡은 자전거를 고쳤어요", "합창단에서 노래해요", "아프리카 우표를 모아요",
            "대학교에서 화학을 공부해요")),
}


def distractors(lang: str) -> list[str]:
    """The 50 distractor facts of ``lang``: every subject with every predicate."""
    subjects, predicates = _PARTS[lang]
    facts = [f"{s} {p}" for s in subjects for p in predicates]
    assert len(facts) == DISTRACTORS
    return facts
